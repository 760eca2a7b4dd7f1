// Command guestinit is /init of the cgroup v2 test VM: it runs package
// guest and powers the machine off. The host side (package integration/vm)
// builds it statically and packs it into the VM's initramfs.
package main

import "github.com/cellblock/cellblock/integration/vm/guest"

func main() {
	guest.Run()
	guest.PowerOff()
}
