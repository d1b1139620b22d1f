package agent

import "testing"

func TestParseVMNet(t *testing.T) {
	n, err := ParseVMNet("10.213.0.6/30,10.213.0.5")
	if err != nil || n.String() != "10.213.0.6/30,10.213.0.5" || string(n.ResolvConf()) != "nameserver 10.213.0.5\noptions timeout:2 attempts:1\n" {
		t.Fatalf("%v %v %q", n, err, n.ResolvConf())
	}
	for _, bad := range []string{"", "10.213.0.6/30", "10.213.0.6/30,10.213.0.9", "10.213.0.6/30,10.213.0.6",
		"fd00::2/64,fd00::1", "10.213.0.6/31,10.213.0.7", "10.213.0.6/30,x", "10.213.0.6,10.213.0.5", "10.213.0.6/30,10.213.0.5,1"} {
		if _, err := ParseVMNet(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
