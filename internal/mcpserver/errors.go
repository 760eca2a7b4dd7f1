package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/client"
)

// daemonFailure turns a failure to get an answer from the daemon into a
// tool result that says plainly what happened and what to check. It is
// never a protocol error: the model should see it.
func (h *handler) daemonFailure(ctx context.Context, action string, err error) *mcp.CallToolResult {
	var apiErr *api.Error
	switch {
	case ctx.Err() != nil:
		return textResult("The call was cancelled before it finished; the sandbox stopped the run.", true)
	case errors.Is(err, client.ErrUnreachable):
		h.log.Warn("cellblockd is not reachable", "socket", h.client.Socket(), "err", err)
		return textResult(unreachableText(h.client.Socket(), err, action), true)
	case errors.As(err, &apiErr):
		return textResult(fmt.Sprintf("The cellblock daemon refused to %s: %v.", action, apiErr), true)
	default:
		h.log.Warn("unexpected answer from cellblockd", "action", action, "err", err)
		return textResult(fmt.Sprintf("cellblock-mcp could not %s: %v. "+
			"The cellblock daemon gave an answer cellblock-mcp could not use; its log (for example journalctl -u cellblockd) may say why. "+
			"Calling again may work.", action, err), true)
	}
}

// unreachableText explains that the daemon cannot be reached and what to
// check, most likely cause first.
func unreachableText(socket string, err error, action string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "The cellblock daemon (cellblockd) is not reachable, so cellblock-mcp could not %s. ", action)
	fmt.Fprintf(&b, "It tried the Unix socket %s and got: %s.\n", socket, rootCause(err))

	switch {
	case errors.Is(err, syscall.ENOENT):
		b.WriteString("The socket does not exist: cellblockd is not running, or it listens on another path.\n")
	case errors.Is(err, syscall.ECONNREFUSED):
		b.WriteString("The socket exists but nothing is listening on it: cellblockd has stopped and left it behind.\n")
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		fmt.Fprintf(&b, "Permission denied: the user cellblock-mcp runs as (uid %d) may not use the socket%s.\n",
			os.Getuid(), socketOwnerText(socket))
	}

	b.WriteString("Things to check:\n")
	b.WriteString("- Is cellblockd running? For example: systemctl status cellblockd (or start it with: sudo cellblockd).\n")
	fmt.Fprintf(&b, "- Is %s the socket it listens on? cellblock-mcp uses its --socket flag, else $%s, else %s; cellblockd uses its own --socket flag.\n",
		socket, api.SocketEnv, api.DefaultSocket)
	b.WriteString("- May this user use it? Users other than root need to be in the socket's group (\"cellblock\" by default): " +
		"sudo usermod -aG cellblock USER, then start a new login session and restart the MCP client.\n")
	b.WriteString("Nothing was run. Tell the user, since this needs fixing outside the sandbox.")
	return b.String()
}

// rootCause is the innermost error's text, which for a dial failure is the
// system's message ("no such file or directory").
func rootCause(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// socketOwnerText describes who may use the socket, when it can be seen.
func socketOwnerText(socket string) string {
	fi, err := os.Stat(socket)
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	group := strconv.FormatUint(uint64(st.Gid), 10)
	if g, err := user.LookupGroupId(group); err == nil {
		group = g.Name
	}
	return fmt.Sprintf(" (mode %04o, group %s)", fi.Mode().Perm(), group)
}
