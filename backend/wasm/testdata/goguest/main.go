// Command goguest is a WASI test guest (GOOS=wasip1 GOARCH=wasm), built from
// source by the wasm backend's tests. argv[1] picks what it does.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: goguest MODE ARGS...")
		os.Exit(2)
	}
	a := os.Args[2:]
	switch os.Args[1] {
	case "hello":
		fmt.Println("hello")
	case "args":
		json.NewEncoder(os.Stdout).Encode(os.Args)
	case "env":
		json.NewEncoder(os.Stdout).Encode(os.Environ())
	case "exit":
		n, _ := strconv.Atoi(a[0])
		os.Exit(n)
	case "stdin":
		io.Copy(os.Stdout, os.Stdin)
	case "cat":
		b, err := os.ReadFile(a[0])
		check(err)
		os.Stdout.Write(b)
	case "write":
		check(os.WriteFile(a[0], []byte(a[1]), 0o644))
	case "symlink":
		check(os.Symlink(a[0], a[1]))
	case "ls":
		es, err := os.ReadDir(a[0])
		check(err)
		for _, e := range es {
			fmt.Println(e.Name())
		}
	case "flood":
		n, _ := strconv.Atoi(a[0])
		buf := make([]byte, 64<<10)
		for i := range buf {
			buf[i] = 'x'
		}
		for n > 0 {
			k := min(n, len(buf))
			os.Stdout.Write(buf[:k])
			n -= k
		}
	case "fill": // write 64 KiB chunks to a file until the write fails
		f, err := os.Create(a[0])
		check(err)
		buf := make([]byte, 64<<10)
		n := 0
		for {
			k, err := f.Write(buf)
			n += k
			if err != nil {
				fmt.Printf("wrote %d: %v\n", n, err)
				return
			}
		}
	case "files": // create empty files until it fails
		for i := 0; ; i++ {
			f, err := os.Create(fmt.Sprintf("%s/f%d", a[0], i))
			if err != nil {
				fmt.Printf("created %d: %v\n", i, err)
				return
			}
			f.Close()
		}
	case "spin":
		for {
		}
	case "alloc": // allocate 1 MiB chunks until the runtime dies of it
		var keep [][]byte
		for i := 0; ; i++ {
			b := make([]byte, 1<<20)
			for j := 0; j < len(b); j += 4096 {
				b[j] = byte(i)
			}
			keep = append(keep, b)
			fmt.Fprintln(os.Stderr, "MiB", len(keep))
		}
	case "random":
		var b [16]byte
		_, err := rand.Read(b[:])
		check(err)
		fmt.Println(hex.EncodeToString(b[:]))
	case "time":
		fmt.Println(time.Now().Unix())
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", os.Args[1])
		os.Exit(2)
	}
}

func check(err error) {
	if err != nil {
		fmt.Println("ERR:", err)
		os.Exit(1)
	}
}
