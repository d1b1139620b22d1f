package oci

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wovyr/wovyr/image"
	"github.com/wovyr/wovyr/sandbox"
)

// TestOneShotWorkloadIsInit: a one-shot sandbox starts nothing at Prepare
// (no process, no runtime state) and runs its workload as the container's
// init — under runc/crun as the only child of wovyr-guest's "job", the
// init (agent.RunLeader) — with its argv, stdin, env, working directory,
// stdout, stderr and exit status passed straight through.
func TestOneShotWorkloadIsInit(t *testing.T) {
	script := `[ $$ = 1 ] && echo init || echo child; tr '\0' ' ' < /proc/1/cmdline; echo; cat; echo "foo=$FOO"; pwd; echo err >&2; exit 7`
	inits := map[string]string{
		"container": "child\n/.wovyr/agent job --nproc=128 -- /bin/sh /bin/sh -c " + script + " \n",
		"gvisor":    "init\n/bin/sh -c " + script + " \n",
	}
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			inv := cmd("/bin/sh", "-c", script)
			inv.Workload.Stdin = []byte("in\n")
			inv.Workload.Env = []string{"FOO=bar", "PATH=/bin"}
			res, _ := runChecked(t, b, inv, func(s *Sandbox) {
				if p := treeProcs(poolCgroup(s.id)); len(p) > 0 || s.d.exists(s.id) {
					t.Errorf("a prepared one-shot sandbox runs pids %v (runtime state: %v)", p, s.d.exists(s.id))
				}
			})
			want := inits[name] + "in\nfoo=bar\n/workspace\n"
			if string(res.Stdout) != want || string(res.Stderr) != "err\n" || res.ExitCode != 7 || res.Class != sandbox.OK {
				t.Fatalf("got class %q exit %d stdout %q stderr %q; want exit 7, stdout %q, stderr \"err\\n\"",
					res.Class, res.ExitCode, res.Stdout, res.Stderr, want)
			}
			if res.Timings.Started.IsZero() || res.Timings.Finished.Before(res.Timings.Started) {
				t.Errorf("timings %+v", res.Timings)
			}
		})
	}
}

// constructors are the package's two backends, by name.
var constructors = []struct {
	name string
	new  func(Config) (*Backend, error)
}{{"container", NewContainer}, {"gvisor", NewGVisor}}

// oneShotAndPooled makes the backend twice: as a one-shot configuration
// and as a pool's.
func oneShotAndPooled(t *testing.T, mk func(Config) (*Backend, error)) (oneShot, pooled *Backend) {
	t.Helper()
	oneShot, err := mk(testConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Pooled = true
	if pooled, err = mk(cfg); err != nil {
		t.Fatal(err)
	}
	return oneShot, pooled
}

// TestOneShotMatchesAgent runs the same invocations as a one-shot
// sandbox's init and through a pooled sandbox's agent: exit status,
// output, truncation and class agree, also where the command cannot start
// (looked up by the host in the sandbox's root for the one-shot run).
func TestOneShotMatchesAgent(t *testing.T) {
	capped := cmd("/bin/sh", "-c", "yes | head -c 100000; exit 4")
	capped.Limits.Output = 1000
	noPath := cmd("true")
	noPath.Workload.Env = nil
	invs := map[string]*sandbox.Invocation{
		"exit":           cmd("/bin/sh", "-c", "echo out; echo err >&2; exit 3"),
		"not-found":      cmd("no-such-command"),
		"no-such-path":   cmd("/no/such/file"),
		"not-executable": cmd("/etc/passwd"),
		"directory":      cmd("/etc"),
		"relative":       cmd("../bin/echo", "rel"),
		"no-path":        noPath,
		"capped":         capped,
	}
	for _, mk := range constructors {
		t.Run(mk.name, func(t *testing.T) {
			oneShot, pooled := oneShotAndPooled(t, mk.new)
			for name, inv := range invs {
				a, b := run(t, oneShot, inv), run(t, pooled, inv)
				if a.Class != b.Class || a.ExitCode != b.ExitCode || string(a.Stdout) != string(b.Stdout) || string(a.Stderr) != string(b.Stderr) ||
					a.StdoutTruncated != b.StdoutTruncated || a.StderrTruncated != b.StderrTruncated {
					t.Errorf("%s: one-shot %q exit %d out %.80q err %q trunc %v; agent %q exit %d out %.80q err %q trunc %v", name,
						a.Class, a.ExitCode, a.Stdout, a.Stderr, a.StdoutTruncated, b.Class, b.ExitCode, b.Stdout, b.Stderr, b.StdoutTruncated)
				}
			}
		})
	}
}

// TestOneShotExecFailure: files that exist but that execve refuses — not
// a program, a script whose interpreter is missing — fail as they do
// through the agent (exit 127, the same reason), never as a backend failure
// or as the runtime's own exit status, and nothing is left behind.
func TestOneShotExecFailure(t *testing.T) {
	for _, mk := range constructors {
		t.Run(mk.name, func(t *testing.T) {
			oneShot, pooled := oneShotAndPooled(t, mk.new)
			tmpl, remove, err := rawTemplate(oneShot, []string{"bin"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer remove()
			bin := filepath.Join(image.RootFS(oneShot.imagesDir(), tmpl), "bin")
			for name, data := range map[string]string{"bad": "not a program\x00", "orphan": "#!/no/such/interpreter\n"} {
				if err := os.WriteFile(filepath.Join(bin, name), []byte(data), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for name, reason := range map[string]string{"bad": "exec format error", "orphan": "no such file or directory"} {
				inv := cmd("/bin/" + name)
				inv.Workload.Image = tmpl
				want := "wovyr: fork/exec /bin/" + name + ": " + reason + "\n"
				for mode, b := range map[string]*Backend{"one-shot": oneShot, "pooled": pooled} {
					res := run(t, b, inv)
					if res.Class != sandbox.OK || res.ExitCode != 127 || string(res.Stderr) != want || len(res.Stdout) != 0 {
						t.Errorf("%s %s: class %q exit %d stdout %q stderr %q; want exit 127, stderr %q", mode, name, res.Class, res.ExitCode, res.Stdout, res.Stderr, want)
					}
				}
			}
		})
	}
}

// TestOneShotCancel: cancelling a one-shot run kills the container (class
// killed) and leaves nothing behind.
func TestOneShotCancel(t *testing.T) {
	for name, b := range newBackends(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sb, err := b.Prepare(ctx, sandbox.Template{Kind: sandbox.KindCommand})
			if err != nil {
				t.Fatal(err)
			}
			s := sb.(*Sandbox)
			runCtx, stop := context.WithCancel(ctx)
			time.AfterFunc(2*time.Second, stop)
			start := time.Now()
			res, err := sb.Run(runCtx, cmd("/bin/sleep", "60"))
			took := time.Since(start)
			if derr := sb.Destroy(ctx); derr != nil {
				t.Error(derr)
			}
			assertNoLeftovers(t, b, s)
			if err != nil {
				t.Fatal(err)
			}
			if res.Class != sandbox.Killed || took > 20*time.Second {
				t.Fatalf("class %q after %s (%s), want killed", res.Class, took, res.Error)
			}
		})
	}
}

// TestRuntimeError reads the runtimes' error logs: crun's plain lines,
// runc's and runsc's JSON with levels below error skipped.
func TestRuntimeError(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ log, want string }{
		{"", ""},
		{"executable file `x` not found in $PATH: No such file or directory\n", "executable file `x` not found in $PATH: No such file or directory"},
		{`{"msg":"starting","level":"info","time":"t"}` + "\n" + `{"msg":"running container: exec format error","level":"error","time":"t"}` + "\n", "running container: exec format error"},
		{`{"msg":"only a warning","level":"warning"}` + "\n", ""},
	} {
		p := filepath.Join(dir, "log")
		if err := os.WriteFile(p, []byte(tc.log), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := runtimeError(p); got != tc.want {
			t.Errorf("runtimeError(%q) = %q, want %q", tc.log, got, tc.want)
		}
	}
	if got := runtimeError(filepath.Join(dir, "absent")); got != "" {
		t.Errorf("absent log: %q", got)
	}
}
