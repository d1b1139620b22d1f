// hog allocates 1 MiB at a time until malloc fails, then reports how much it
// got and exits 12 (ENOMEM): a guest that dies of its memory limit.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *volatile keep[1 << 14]; // volatile: the allocations must happen

int main(void) {
  size_t n = 0;
  while (n < sizeof keep / sizeof keep[0]) {
    char *p = malloc(1 << 20);
    if (p == NULL) break;
    memset(p, 1, 1 << 20);
    keep[n++] = p;
  }
  printf("allocated %zu MiB\n", n);
  return 12;
}
