package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/wovyr/wovyr/egress/netns"
)

// Leftovers lists what this configuration's tag owns on the machine: slot
// netns names, nft tables (in the host netns) and host-side links. Tests assert it
// is empty after they finish.
type Leftovers struct {
	Netns, Tables, Links []string
}

// Empty reports whether nothing is left.
func (l Leftovers) Empty() bool { return len(l.Netns)+len(l.Tables)+len(l.Links) == 0 }

// Find lists the leftovers of cfg's tag without removing anything.
func Find(ctx context.Context, cfg Config) (Leftovers, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Leftovers{}, err
	}
	var out Leftovers
	names, err := netns.List("wovyr-" + cfg.Tag + "-s")
	if err != nil {
		return out, err
	}
	for _, n := range names {
		if isDigits(strings.TrimPrefix(n, "wovyr-"+cfg.Tag+"-s")) {
			out.Netns = append(out.Netns, n)
		}
	}
	err = withHost(cfg, func(cc *nftables.Conn, h *netlink.Handle) error {
		tables, err := cc.ListTablesOfFamily(nftables.TableFamilyINet)
		if err != nil {
			return fmt.Errorf("list nft tables: %w", err)
		}
		for _, t := range tables {
			if strings.HasPrefix(t.Name, "wovyr_"+cfg.Tag+"_") {
				out.Tables = append(out.Tables, t.Name)
			}
		}
		links, err := h.LinkList()
		if err != nil {
			return fmt.Errorf("list links: %w", err)
		}
		for _, l := range links {
			if n := l.Attrs().Name; strings.HasPrefix(n, "wv"+cfg.Tag) && isDigits(n[2+len(cfg.Tag):]) {
				out.Links = append(out.Links, n)
			}
		}
		return nil
	})
	if errors.Is(err, errNoHost) {
		err = nil
	}
	return out, err
}

// Reconcile removes everything cfg's tag owns that no live Service holds:
// run it at start-up, before NewService. Slot netns are removed last, so a
// crash between steps leaves something Reconcile still finds.
func Reconcile(ctx context.Context, cfg Config, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	left, err := Find(ctx, cfg)
	if err != nil {
		return err
	}
	cfg, _ = cfg.withDefaults()
	var errs []error
	if len(left.Tables)+len(left.Links) > 0 {
		errs = append(errs, withHost(cfg, func(cc *nftables.Conn, h *netlink.Handle) error {
			for _, t := range left.Tables {
				cc.DelTable(&nftables.Table{Name: t, Family: nftables.TableFamilyINet})
			}
			var errs []error
			if err := cc.Flush(); err != nil {
				errs = append(errs, fmt.Errorf("delete tables: %w", err))
			}
			for _, n := range left.Links {
				if l, err := h.LinkByName(n); err == nil {
					errs = append(errs, h.LinkDel(l))
				}
			}
			return errors.Join(errs...)
		}))
	}
	for _, n := range left.Netns {
		errs = append(errs, netns.Delete(n))
	}
	if !left.Empty() {
		log.Info("egress reconcile removed leftovers", "tag", cfg.Tag, "netns", left.Netns, "tables", left.Tables, "links", left.Links)
	}
	return errors.Join(errs...)
}

var errNoHost = errors.New("host netns is gone")

func withHost(cfg Config, fn func(*nftables.Conn, *netlink.Handle) error) error {
	if cfg.HostNetns == "" {
		cc, err := nftables.New()
		if err != nil {
			return err
		}
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		return fn(cc, h)
	}
	ns, err := vnetns.GetFromPath(cfg.HostNetns)
	if err != nil {
		return errNoHost
	}
	defer ns.Close()
	cc, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return err
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	return fn(cc, h)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
