package microvm

import (
	"testing"

	"github.com/wovyr/wovyr/agent"
	"github.com/wovyr/wovyr/sandbox"
)

// Regression for issue #26 item 4: the guest agent's "could not start"
// reply became Result.Error with class ok and nothing on stderr, unlike
// every other backend.
func TestFillResultNotStartedIsTheShellsLine(t *testing.T) {
	rep := agent.VMReply{Reply: agent.Reply{ID: "j", ExitCode: 127, Error: "fork/exec /nope: no such file or directory"}}
	res := &sandbox.Result{}
	if err := fillResult(res, rep, "j", sandbox.Limits{}.WithDefaults()); err != nil {
		t.Fatal(err)
	}
	want := "wovyr: fork/exec /nope: no such file or directory\n"
	if res.Class != sandbox.OK || res.ExitCode != sandbox.ExitNotStarted || string(res.Stderr) != want || len(res.Stdout) != 0 || res.Error != "" {
		t.Fatalf("result %+v, want class ok, exit 127, stderr %q, no error", res, want)
	}
}
