//go:build cgo && seccomp

package seccomp

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Seccomp return values (linux/seccomp.h).
const (
	retKillThread = 0x00000000
	retErrno      = 0x00050000
	retAllow      = 0x7fff0000
)

// TestLibseccompKillsForeignABIs checks, without needing the kernel to
// support them, what the filter does with calls from a foreign ABI. It
// builds a libseccomp filter the way libcontainer's InitSeccomp does (our
// default action, our architecture list, libseccomp's default
// bad-architecture action) and runs the exported BPF on synthetic
// seccomp_data.
//
// libcontainer prepends an ENOSYS stub to this program, but the stub only
// handles calls whose arch is one of ours and which are not x32 (bit 30
// clear); everything else jumps straight into libseccomp's program, which is
// what this test runs. TestFilterKillsForeignABIs checks the same end to end
// where the kernel can make such calls.
func TestLibseccompKillsForeignABIs(t *testing.T) {
	cfg := Config()
	f, err := libseccomp.NewFilter(libseccomp.ActErrno.SetReturnCode(int16(*cfg.DefaultErrnoRet)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Release()
	for _, a := range cfg.Architectures {
		arch, err := libseccomp.GetArchFromString(a)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.AddArch(arch); err != nil {
			t.Fatal(err)
		}
	}
	getpid, err := libseccomp.GetSyscallFromNameByArch("getpid", libseccomp.ArchAMD64)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.AddRule(getpid, libseccomp.ActAllow); err != nil {
		t.Fatal(err)
	}
	prog := exportBPF(t, f)
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("load exported filter into a BPF VM: %v", err)
	}

	const (
		auditArchX8664 = 0xc000003e // AUDIT_ARCH_X86_64
		auditArchI386  = 0x40000003 // AUDIT_ARCH_I386
		x32SyscallBit  = 0x40000000
	)
	for _, tc := range []struct {
		what string
		arch uint32
		nr   uint32
		want uint32
	}{
		{"x86_64 getpid", auditArchX8664, unix.SYS_GETPID, retAllow},
		{"x86_64 mount", auditArchX8664, unix.SYS_MOUNT, retErrno | uint32(unix.EPERM)},
		{"x32 getpid", auditArchX8664, x32SyscallBit | unix.SYS_GETPID, retKillThread},
		{"x32 mount", auditArchX8664, x32SyscallBit | unix.SYS_MOUNT, retKillThread},
		{"i386 getpid (int $0x80)", auditArchI386, 20, retKillThread},
		{"i386 clone (int $0x80)", auditArchI386, 120, retKillThread},
	} {
		got, err := vm.Run(seccompData(tc.arch, tc.nr))
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		if uint32(got) != tc.want {
			t.Errorf("%s: filter returns %#x, want %#x", tc.what, got, tc.want)
		}
	}
}

// exportBPF returns the filter's BPF program, disassembled.
func exportBPF(t *testing.T, f *libseccomp.ScmpFilter) []bpf.Instruction {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "filter.bpf"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := f.ExportBPF(out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	var raw []bpf.RawInstruction
	for ; len(data) >= 8; data = data[8:] { // struct sock_filter, host order
		raw = append(raw, bpf.RawInstruction{
			Op: binary.NativeEndian.Uint16(data[0:]),
			Jt: data[2],
			Jf: data[3],
			K:  binary.NativeEndian.Uint32(data[4:]),
		})
	}
	prog, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("exported filter has instructions x/net/bpf cannot disassemble")
	}
	return prog
}

// seccompData encodes struct seccomp_data {int nr; u32 arch; u64 ip; u64
// args[6]} for x/net/bpf's VM. The kernel lays the fields out in host order
// (little-endian on x86_64) and filters load 32-bit words; the VM loads
// words big-endian, so each word is stored big-endian at its host offset.
func seccompData(arch, nr uint32) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[0:], nr)
	binary.BigEndian.PutUint32(b[4:], arch)
	return b
}
