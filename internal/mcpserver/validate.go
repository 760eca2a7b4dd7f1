package mcpserver

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/cellblock/cellblock/internal/api"
	"github.com/cellblock/cellblock/internal/pep723"
)

// checkerScript, checker.py, is the program validate_python runs in the
// sandbox, with the code to check on its standard input. It compiles the
// code, which never executes it, with dont_inherit so that its own
// __future__ imports do not leak into the check, and prints one JSON report
// (checkReport). The code is read as bytes so that a PEP 263 coding line is
// honoured just as when the file is run. The file name given to compile is
// in angle brackets: with a real name such as "main.py", Python would fill
// in the error's source line from that file, which is the checker itself.
//
//go:embed checker.py
var checkerScript string

// checkReport is what checkerScript prints.
type checkReport struct {
	OK       bool          `json:"ok"`
	Python   string        `json:"python"`
	Error    *syntaxError  `json:"error"`
	Warnings []syntaxAlert `json:"warnings"`
}

type syntaxError struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Line      int    `json:"line,omitempty"`
	Column    int    `json:"column,omitempty"`
	EndLine   int    `json:"end_line,omitempty"`
	EndColumn int    `json:"end_column,omitempty"`
	Text      string `json:"text,omitempty"`
}

type syntaxAlert struct {
	Category string `json:"category"`
	Message  string `json:"message"`
	Line     int    `json:"line,omitempty"`
}

// validation is validate_python's structured content.
type validation struct {
	Valid    bool           `json:"valid"`
	Syntax   syntaxVerdict  `json:"syntax"`
	Metadata metadataReport `json:"metadata"`
}

type syntaxVerdict struct {
	Checked  bool          `json:"checked"`
	OK       bool          `json:"ok"`
	Python   string        `json:"python,omitempty"`
	Error    *syntaxError  `json:"error"`
	Warnings []syntaxAlert `json:"warnings,omitempty"`
	Reason   string        `json:"reason,omitempty"`
}

type metadataReport struct {
	Present        bool     `json:"present"`
	Dependencies   []string `json:"dependencies,omitempty"`
	RequiresPython string   `json:"requires_python,omitempty"`
	Error          string   `json:"error,omitempty"`
}

// validatePython is validate_python's handler: PEP 723 in Go, syntax in the
// sandbox.
func (h *handler) validatePython(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	h.refreshInfo(ctx)

	var args validateArgs
	err := decodeArgs(req, &args, validateArgNames...)
	if err == nil {
		err = args.check(h.currentInfo())
	}
	if err != nil {
		return textResult("Nothing was checked: "+err.Error()+".", true), nil
	}

	var out validation
	meta, metaErr := pep723.Parse(args.Code)
	out.Metadata = metadataReport{Present: meta.Present, Dependencies: meta.Dependencies, RequiresPython: meta.RequiresPython}
	if metaErr != nil {
		out.Metadata.Error = metaErr.Error()
	}

	rr := &api.RunRequest{
		Code:   checkerCode(meta.RequiresPython, args.Python),
		Stdin:  args.Code,
		Python: strings.TrimSpace(args.Python),
	}
	res, err := h.client.Run(ctx, rr)
	if err != nil {
		out.Syntax.Reason = resultText(h.daemonFailure(ctx, "check the code", err))
	} else {
		out.Syntax = syntaxFromResult(res, h.currentInfo())
	}
	out.Valid = out.Syntax.Checked && out.Syntax.OK && out.Metadata.Error == ""

	return &mcp.CallToolResult{
		Content:           []mcp.Content{mcp.NewTextContent(validationText(&out))},
		StructuredContent: &out,
		IsError:           !out.Syntax.Checked,
	}, nil
}

// checkerCode is the checker script, with a PEP 723 block carrying the
// checked code's requires-python when no version is asked for, so that the
// daemon picks the interpreter the code would really run with.
func checkerCode(requiresPython, python string) string {
	if requiresPython == "" || strings.TrimSpace(python) != "" {
		return checkerScript
	}
	// A JSON string is a valid TOML basic string: both escape with \" \\
	// \n \t and \uXXXX, and the encoder writes no raw line breaks.
	var quoted strings.Builder
	enc := json.NewEncoder(&quoted)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(requiresPython); err != nil {
		return checkerScript
	}
	return "# /// script\n# requires-python = " + strings.TrimSuffix(quoted.String(), "\n") + "\n# ///\n" + checkerScript
}

// syntaxFromResult reads the checker's report out of the run's result.
func syntaxFromResult(res *api.Result, info *api.Info) syntaxVerdict {
	if res.Error != nil {
		return syntaxVerdict{Reason: refusalText(res.Error, info)}
	}
	if res.TimedOut || res.OOMKilled || res.ExitCode != 0 {
		return syntaxVerdict{Reason: "the syntax checker did not finish: " + stopText(res) + tail(res.Stderr)}
	}
	var rep checkReport
	if err := json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &rep); err != nil {
		return syntaxVerdict{Reason: fmt.Sprintf("the syntax checker's report could not be read (%v)%s", err, tail(res.Stderr))}
	}
	python := rep.Python
	if python == "" {
		python = res.Python
	}
	return syntaxVerdict{
		Checked:  true,
		OK:       rep.OK && rep.Error == nil,
		Python:   python,
		Error:    rep.Error,
		Warnings: rep.Warnings,
	}
}

// tail is the end of a checker's stderr, for a failure message.
func tail(stderr string) string {
	stderr = strings.TrimSpace(stderr)
	if stderr == "" {
		return ""
	}
	if len(stderr) > 1000 {
		stderr = "..." + stderr[len(stderr)-1000:]
	}
	return "; its stderr ends with:\n" + stderr
}

// validationText reports a validation for a language model.
func validationText(v *validation) string {
	var b strings.Builder
	s := v.Syntax
	switch {
	case !s.Checked:
		b.WriteString("Syntax: not checked. " + s.Reason)
	case s.OK:
		fmt.Fprintf(&b, "Syntax: OK (compiled by Python %s; the code was not run).", s.Python)
	default:
		e := s.Error
		if e == nil {
			e = &syntaxError{Type: "SyntaxError", Message: "the code does not compile"}
		}
		fmt.Fprintf(&b, "Syntax: %s", e.Type)
		if e.Line > 0 {
			fmt.Fprintf(&b, " at line %d", e.Line)
			if e.Column > 0 {
				fmt.Fprintf(&b, ", column %d", e.Column)
			}
		}
		fmt.Fprintf(&b, ": %s (compiled by Python %s).", e.Message, s.Python)
		if e.Text != "" {
			line := strings.TrimRight(e.Text, " \t")
			b.WriteString("\n    " + line)
			if e.Column > 0 && e.Column <= len([]rune(line))+1 {
				b.WriteString("\n    " + caretPad(line, e.Column-1) + "^")
			}
		}
	}
	for _, w := range s.Warnings {
		if w.Line > 0 {
			fmt.Fprintf(&b, "\nWarning at line %d: %s: %s", w.Line, w.Category, w.Message)
		} else {
			fmt.Fprintf(&b, "\nWarning: %s: %s", w.Category, w.Message)
		}
	}

	b.WriteString("\n\nPEP 723 metadata: ")
	m := v.Metadata
	switch {
	case m.Error != "":
		b.WriteString("the '# /// script' block is invalid: " + m.Error + ".")
	case !m.Present:
		b.WriteString("none (no '# /// script' block). Packages can still be given to run_python in \"dependencies\".")
	default:
		b.WriteString("a '# /// script' block asks for ")
		if len(m.Dependencies) > 0 {
			b.WriteString("dependencies " + strings.Join(m.Dependencies, ", "))
		} else {
			b.WriteString("no dependencies")
		}
		if m.RequiresPython != "" {
			b.WriteString(" and requires-python " + m.RequiresPython)
		}
		b.WriteString(". [tool.*] tables, if any, are ignored.")
	}

	switch {
	case !s.Checked:
	case v.Valid:
		b.WriteString("\n\nVerdict: valid.")
	default:
		b.WriteString("\n\nVerdict: not valid; fix the problems above before running it.")
	}
	return b.String()
}

// caretPad is white space as wide as the first n characters of line,
// keeping its tabs so that the caret lines up.
func caretPad(line string, n int) string {
	var b strings.Builder
	for i, r := range []rune(line) {
		if i >= n {
			break
		}
		if r == '\t' {
			b.WriteRune('\t')
		} else {
			b.WriteRune(' ')
		}
	}
	return b.String()
}

// resultText joins the text contents of a tool result.
func resultText(r *mcp.CallToolResult) string {
	var parts []string
	for _, c := range r.Content {
		if t, ok := c.(mcp.TextContent); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}
