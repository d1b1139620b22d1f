package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// NetModuleList names the initramfs file (beside load.order) that lists the
// NIC driver and its dependencies; the guest loads them only when the host
// gave it a NIC (CmdlineNet), so a VM without one pays nothing for them.
const NetModuleList = "net.order"

// loadNet reads CmdlineNet and, when present, loads the NIC driver. It
// returns nil when the VM has no NIC.
func loadNet(stage func(string)) (*VMNet, error) {
	v := cmdlineValue(CmdlineNet)
	if v == "" {
		return nil, nil
	}
	n, err := ParseVMNet(v)
	if err != nil {
		return nil, err
	}
	if err := loadModules("/lib/modules", NetModuleList, nil, stage); err != nil {
		return nil, err
	}
	return &n, nil
}

// configureNet brings up lo and the NIC with n's address and a default
// route via the gateway, and points the workload root's resolv.conf at the
// gateway's stub. It runs after the chroot, before any job.
func configureNet(n VMNet) error {
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/all/disable_ipv6", []byte("1"), 0)
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/default/disable_ipv6", []byte("1"), 0)
	nic, err := waitNIC(5 * time.Second)
	if err != nil {
		return err
	}
	nl, err := openRTNL()
	if err != nil {
		return err
	}
	defer nl.close()
	if err := nl.linkUp(nic.Index); err != nil {
		return fmt.Errorf("%s up: %w", nic.Name, err)
	}
	if err := nl.addAddr(nic.Index, n); err != nil {
		return fmt.Errorf("%s address %s: %w", nic.Name, n.Addr, err)
	}
	if err := nl.addDefaultRoute(nic.Index, n); err != nil {
		return fmt.Errorf("default route via %s: %w", n.Gateway, err)
	}
	return replaceEtc("resolv.conf", n.ResolvConf(), 0o644)
}

// replaceEtc writes the workload root's /etc/name afresh: a template's file
// there is removed first, so a symlink in the template is never followed.
func replaceEtc(name string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll("/etc", 0o755); err != nil {
		return err
	}
	p := "/etc/" + name
	_ = os.Remove(p)
	if err := os.WriteFile(p, data, mode); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// waitNIC returns the VM's one non-loopback interface once the driver has
// registered it.
// loopbackUp brings lo up; the kernel then gives it 127.0.0.1/8 itself.
// Every VM does it, with a NIC or without.
func loopbackUp() error {
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		return fmt.Errorf("lo: %w", err)
	}
	nl, err := openRTNL()
	if err != nil {
		return err
	}
	defer nl.close()
	if err := nl.linkUp(lo.Index); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}

func openRTNL() (*rtnl, error) {
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	if err := unix.Bind(s, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(s)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	return &rtnl{fd: s}, nil
}

func (r *rtnl) close() { unix.Close(r.fd) }

func waitNIC(limit time.Duration) (*net.Interface, error) {
	deadline := time.Now().Add(limit)
	for {
		ents, _ := os.ReadDir("/sys/class/net")
		for _, e := range ents {
			if e.Name() == "lo" {
				continue
			}
			if _, err := os.Stat(filepath.Join("/sys/class/net", e.Name(), "device")); err == nil {
				return net.InterfaceByName(e.Name())
			}
		}
		if time.Now().After(deadline) {
			return nil, errors.New("the NIC did not appear")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// rtnl is the few rtnetlink requests the guest needs, written by hand so
// the static guest binary carries no netlink library.
type rtnl struct {
	fd  int
	seq uint32
}

func (r *rtnl) linkUp(index int) error {
	b := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	binary.NativeEndian.PutUint32(b[8:], unix.IFF_UP)  // flags
	binary.NativeEndian.PutUint32(b[12:], unix.IFF_UP) // change
	return r.do(unix.RTM_NEWLINK, 0, b)
}

func (r *rtnl) addAddr(index int, n VMNet) error {
	return r.do(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, addrMsg(index, n))
}

func (r *rtnl) delAddr(index int, n VMNet) error {
	return r.do(unix.RTM_DELADDR, 0, addrMsg(index, n))
}

func addrMsg(index int, n VMNet) []byte {
	b := []byte{unix.AF_INET, byte(n.Addr.Bits()), 0, unix.RT_SCOPE_UNIVERSE, 0, 0, 0, 0}
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	ip := n.Addr.Addr().AsSlice()
	b = rtattr(b, unix.IFA_LOCAL, ip)
	return rtattr(b, unix.IFA_ADDRESS, ip)
}

// setMAC sets the link's hardware address (virtio-net passes it to the
// device over its control queue).
func (r *rtnl) setMAC(index int, mac net.HardwareAddr) error {
	b := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	b = rtattr(b, unix.IFLA_ADDRESS, mac)
	return r.do(unix.RTM_NEWLINK, 0, b)
}

func (r *rtnl) addDefaultRoute(index int, n VMNet) error {
	return r.do(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL, routeMsg(index, n))
}

func (r *rtnl) replaceDefaultRoute(index int, n VMNet) error {
	return r.do(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, routeMsg(index, n))
}

func routeMsg(index int, n VMNet) []byte {
	b := make([]byte, unix.SizeofRtMsg)
	b[0], b[4], b[5], b[6], b[7] = unix.AF_INET, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, unix.RT_SCOPE_UNIVERSE, unix.RTN_UNICAST
	b = rtattr(b, unix.RTA_GATEWAY, n.Gateway.AsSlice())
	oif := make([]byte, 4)
	binary.NativeEndian.PutUint32(oif, uint32(index))
	return rtattr(b, unix.RTA_OIF, oif)
}

func rtattr(b []byte, typ uint16, data []byte) []byte {
	l := unix.SizeofRtAttr + len(data)
	a := make([]byte, (l+3)&^3)
	binary.NativeEndian.PutUint16(a, uint16(l))
	binary.NativeEndian.PutUint16(a[2:], typ)
	copy(a[unix.SizeofRtAttr:], data)
	return append(b, a...)
}

// do sends one request and waits for its acknowledgement.
func (r *rtnl) do(typ uint16, flags uint16, body []byte) error {
	r.seq++
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg, uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK|flags)
	binary.NativeEndian.PutUint32(msg[8:], r.seq)
	msg = append(msg, body...)
	if err := unix.Sendto(r.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(r.fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := parseReplies(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.seq != r.seq || m.typ != unix.NLMSG_ERROR {
				continue
			}
			if m.errno != 0 {
				return unix.Errno(-m.errno)
			}
			return nil
		}
	}
}

type nlReply struct {
	typ   uint16
	seq   uint32
	errno int32
}

func parseReplies(b []byte) ([]nlReply, error) {
	var out []nlReply
	for len(b) >= unix.SizeofNlMsghdr {
		l := int(binary.NativeEndian.Uint32(b))
		if l < unix.SizeofNlMsghdr || l > len(b) {
			return nil, errors.New("netlink: truncated reply")
		}
		m := nlReply{typ: binary.NativeEndian.Uint16(b[4:]), seq: binary.NativeEndian.Uint32(b[8:])}
		if m.typ == unix.NLMSG_ERROR && l >= unix.SizeofNlMsghdr+4 {
			m.errno = int32(binary.NativeEndian.Uint32(b[unix.SizeofNlMsghdr:]))
		}
		out = append(out, m)
		b = b[(l+3)&^3:]
	}
	return out, nil
}
