package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/net/dns/dnsmessage"
)

// The test's network: a namespace for the router (and the test's client)
// joined by a veth pair to each node's namespace. Every address is inside
// these namespaces; the host's own network is not touched.
//
//	router ns: lo, 127.0.0.1:53 (the test's DNS), :8080 (HAProxy)
//	  rt-a 10.27.1.1/24 <-> eth0 10.27.1.2/24  node a ns
//	  rt-b 10.27.2.1/24 <-> eth0 10.27.2.2/24  node b ns

// run runs a command and fails the test with its output if it fails.
func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// netnsName is a namespace name of this test process's own.
func netnsName(role string) string { return fmt.Sprintf("cb27-%d-%s", os.Getpid(), role) }

// addNetns makes a network namespace with its loopback up, removed when
// the test ends.
func addNetns(t *testing.T, name string) {
	t.Helper()
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v\n%s", name, err, out)
		}
	})
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
}

// link joins the router's namespace to a node's with a veth pair: the
// router's end is routerIf with routerAddr, the node's is eth0 with
// nodeAddr (both /24).
func link(t *testing.T, routerNS, routerIf, routerAddr, nodeNS, nodeAddr string) {
	t.Helper()
	run(t, "ip", "-n", routerNS, "link", "add", routerIf, "type", "veth", "peer", "name", "eth0", "netns", nodeNS)
	run(t, "ip", "-n", routerNS, "addr", "add", routerAddr+"/24", "dev", routerIf)
	run(t, "ip", "-n", routerNS, "link", "set", routerIf, "up")
	run(t, "ip", "-n", nodeNS, "addr", "add", nodeAddr+"/24", "dev", "eth0")
	run(t, "ip", "-n", nodeNS, "link", "set", "eth0", "up")
}

// inNetns runs fn on a thread of its own that has entered the named
// network namespace: sockets fn opens belong to that namespace. A thread
// that cannot go back to the original namespace is never reused.
func inNetns(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		ns, err := netns.GetFromName(name)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter %s: %w", name, err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: it ends with this goroutine.
			errc <- errors.Join(ferr, fmt.Errorf("leave %s: %w", name, err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// dialIn returns a DialContext that connects from inside the namespace.
func dialIn(name string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := inNetns(name, func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
}

// serveDNS answers A queries for name with addrs on 127.0.0.1:53 inside the
// namespace ns (HAProxy's resolvers read /etc/resolv.conf, which
// `ip netns exec` replaces with /etc/netns/NS/resolv.conf), as the
// cluster's DNS answers for the nodes' headless Service. Other questions
// get no answer.
func serveDNS(t *testing.T, ns, name string, addrs []string) {
	t.Helper()
	var pc net.PacketConn
	if err := inNetns(ns, func() error {
		var err error
		pc, err = net.ListenPacket("udp4", "127.0.0.1:53")
		return err
	}); err != nil {
		t.Fatalf("DNS server: %v", err)
	}
	t.Cleanup(func() { pc.Close() })
	dir := filepath.Join("/etc/netns", ns)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := dnsmessage.MustNewName(name + ".")
	var a []dnsmessage.AResource
	for _, s := range addrs {
		a = append(a, dnsmessage.AResource{A: [4]byte(net.ParseIP(s).To4())})
	}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired})
			b.EnableCompression()
			_ = b.StartQuestions()
			_ = b.Question(q)
			_ = b.StartAnswers()
			if q.Type == dnsmessage.TypeA && strings.EqualFold(q.Name.String(), want.String()) {
				for _, r := range a {
					_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 5}, r)
				}
			}
			msg, err := b.Finish()
			if err != nil {
				continue
			}
			_, _ = pc.WriteTo(msg, from)
		}
	}()
}
