package egress

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strings"
)

// ResolvConfServers reads the IPv4 nameservers of a resolv.conf (the host's,
// for Config.UpstreamDNS in production; tests inject the harness server
// instead and never read the host's).
func ResolvConfServers(path string) ([]netip.AddrPort, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []netip.AddrPort
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || fields[0] != "nameserver" {
			continue
		}
		ip, err := netip.ParseAddr(fields[1])
		if err != nil || !ip.Unmap().Is4() {
			continue // IPv6 resolvers: the stub dials IPv4 only
		}
		out = append(out, netip.AddrPortFrom(ip.Unmap(), 53))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s names no IPv4 nameserver", path)
	}
	return out, nil
}
