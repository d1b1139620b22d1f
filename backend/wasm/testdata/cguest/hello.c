// hello is the trivial C guest: it prints its arguments.
#include <stdio.h>

int main(int argc, char **argv) {
  for (int i = 0; i < argc; i++) printf("%s%s", i ? " " : "", argv[i]);
  printf("\n");
  return 0;
}
