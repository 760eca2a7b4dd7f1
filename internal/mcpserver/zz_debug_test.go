package mcpserver

import (
	"fmt"
	"testing"
)

func (n *notes) dump(t *testing.T) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, nt := range n.list {
		t.Logf("%s %v", nt.Method, fmt.Sprint(nt.Params.AdditionalFields))
	}
}
