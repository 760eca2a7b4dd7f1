package mcpserver

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
)

// checkEnvironment is check_environment's handler. It asks the daemon
// afresh on every call, so that it shows the current load and notices a
// daemon that came up after cellblock-mcp.
func (h *handler) checkEnvironment(ctx context.Context, _ mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	info, err := h.client.Info(ctx)
	if err != nil {
		res := h.daemonFailure(ctx, "read the sandbox's description", err)
		if h.currentInfo() == nil && h.startErr != nil {
			res.Content = append(res.Content, mcp.NewTextContent(
				"cellblockd was not reachable when cellblock-mcp started either ("+rootCause(h.startErr)+
					"), so the tool descriptions are generic; they are updated as soon as it is reachable."))
		}
		return res, nil
	}
	if info.Pythons == nil {
		info.Pythons = []api.Python{}
	}
	wasGeneric := h.currentInfo() == nil
	h.adoptInfo(info)

	text := environmentText(info, h.client.Socket(), h.version) + networkNote(h.netAllow)
	if wasGeneric {
		text += "\n\nNote: cellblockd was not reachable when cellblock-mcp started"
		if h.startErr != nil {
			text += " (" + rootCause(h.startErr) + ")"
		}
		text += ", so the tools were listed with generic descriptions. They have now been rebuilt with the limits above " +
			"(clients that follow notifications/tools/list_changed see them at once)."
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{mcp.NewTextContent(text)},
		StructuredContent: info,
	}, nil
}

// environmentText describes the daemon for a language model.
func environmentText(info *api.Info, socket, version string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The cellblock sandbox is up: cellblockd %s answers on %s (cellblock-mcp %s).\n\n", info.Version, socket, version)

	b.WriteString("Python: " + pythonsText(info) + "\n")
	d, m := info.Defaults, info.Maxima
	b.WriteString("Limits per run (default / maximum a call may ask for):\n")
	fmt.Fprintf(&b, "- wall-clock timeout: %s / %s (timeout_seconds)\n", fmtMs(d.TimeoutMs), fmtMs(m.TimeoutMs))
	fmt.Fprintf(&b, "- memory: %s / %s (memory_mb)\n", fmtBytes(d.MemoryBytes), fmtBytes(m.MemoryBytes))
	fmt.Fprintf(&b, "- processes and threads: %d / %d\n", d.Pids, m.Pids)
	fmt.Fprintf(&b, "- CPU: %g / %g core(s)\n", d.CPUs, m.CPUs)
	fmt.Fprintf(&b, "- captured stdout and stderr, each: %s / %s\n", fmtBytes(d.OutputBytes), fmtBytes(m.OutputBytes))
	fmt.Fprintf(&b, "- /tmp and the working directory, each: %s / %s\n", fmtBytes(d.TmpBytes), fmtBytes(m.TmpBytes))

	b.WriteString("\nPolicies:\n")
	b.WriteString("- " + networkText(info) + "\n")
	b.WriteString("- " + filesystemText(info) + "\n")
	if f := info.Files; f != nil {
		fmt.Fprintf(&b, "- Files: run_python's \"files\" puts up to %d files, %s in all, under /work; what the code writes under /work/out comes back, up to %d files of %s each and %s in all, each readable with resources/read for %s.\n",
			f.InCount, fmtBytes(f.InBytes), f.OutCount, fmtBytes(f.OutFileBytes), fmtBytes(f.OutBytes), fmtMs(f.StoreTTLSeconds*1000))
	}
	fmt.Fprintf(&b, "- Isolation: cgroup mode %s; user namespace %s; seccomp filter %s.\n",
		orUnknown(info.CgroupMode), yesNo(info.UserNamespace), yesNo(info.Seccomp))

	b.WriteString("\nLoad: ")
	if info.MaxConcurrent > 0 {
		fmt.Fprintf(&b, "up to %d runs at once, %d more may queue; now %d running, %d queued.\n",
			info.MaxConcurrent, info.QueueSize, info.Running, info.Queued)
	} else {
		fmt.Fprintf(&b, "%d running, %d queued.\n", info.Running, info.Queued)
	}

	b.WriteString("\nDependencies: ")
	if dep := info.Dependencies; dep != nil {
		installer := orUnknown(dep.Installer)
		fmt.Fprintf(&b, "installed with %s", installer)
		switch {
		case dep.NoIndex:
			b.WriteString(", from local wheel directories only (no index)")
		case dep.IndexURL != "":
			b.WriteString(", from the index at " + redactURL(dep.IndexURL))
		default:
			b.WriteString(", from the installer's default index")
		}
		if len(dep.FindLinks) > 0 {
			fmt.Fprintf(&b, " plus %d find-links location(s)", len(dep.FindLinks))
		}
		if dep.OnlyBinary {
			b.WriteString("; wheels only (no source builds)")
		} else {
			b.WriteString("; source builds allowed")
		}
		fmt.Fprintf(&b, ". Cache: %d environment(s), %s", dep.CacheEntries, fmtBytes(dep.CacheBytes))
		if dep.CacheBudget > 0 {
			fmt.Fprintf(&b, " of a %s budget", fmtBytes(dep.CacheBudget))
		}
		b.WriteString(". Index settings inside scripts ([tool.uv] and the like) are ignored.\n")
	} else {
		b.WriteString("the daemon did not report its dependency settings.\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// redactURL drops credentials and query from an index URL before it is
// shown to a model.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(a configured index)"
	}
	u.User = nil
	u.RawQuery = ""
	u.Fragment = ""
	return u.String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
