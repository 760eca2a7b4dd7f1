package mcpserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// What run_python's description says of the code tools: each as a Python
// signature made from its input schema, with the first paragraph of its
// description.

// describe is the part of run_python's description about code tools.
func (ct *CodeTools) describe() string {
	if ct == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n\nTools of other MCP servers, callable from the code: ")
	if len(ct.tools) == 0 {
		b.WriteString("none is allowed here (the operator allows them with --allow-tool).")
	} else {
		b.WriteString(`the code calls them as Python functions with keyword arguments, cellblock.tools.NAME(...) (the global "tools" is cellblock.tools), each call costing no round trip through you: loop over them, filter and aggregate in the code, and end with the value you need (or print it), so that only that comes back. A call returns the tool's structured content as Python data, else its text (parsed when it is JSON); it raises cellblock.ToolError (import cellblock) when the tool fails or its arguments do not match its schema. dir(tools) lists them and help(tools.NAME) describes one. They are:
`)
		n := 0
		for i, t := range ct.tools {
			line := "- " + pySignature(t.name, t.schema)
			if d := firstParagraph(t.description); d != "" {
				line += ": " + d
			}
			if n+len(line) > maxToolsText {
				rest := make([]string, 0, len(ct.tools)-i)
				for _, r := range ct.tools[i:] {
					rest = append(rest, r.name)
				}
				fmt.Fprintf(&b, "- and %s (print(help(tools.NAME)) in the code shows one)\n", strings.Join(rest, ", "))
				break
			}
			n += len(line)
			b.WriteString(line + "\n")
		}
		b.WriteString(`Example: {"code": "rows = [tools.db__query(sql=f'select count(*) from t{i}') for i in range(10)]\nsum(r['count'] for r in rows)"}`)
	}
	if len(ct.refused) > 0 {
		var names []string
		for _, r := range ct.refused {
			if len(names) == 40 {
				names = append(names, fmt.Sprintf("and %d more", len(ct.refused)-40))
				break
			}
			names = append(names, r.name+" ("+r.why+")")
		}
		b.WriteString("\nNot callable from the code (calling them raises cellblock.ToolError): " + strings.Join(names, "; ") + ".")
	}
	if len(ct.failed) > 0 {
		b.WriteString("\nMCP servers that could not be reached: " + strings.Join(ct.failed, "; ") + ".")
	}
	return b.String()
}

// firstParagraph is the start of a tool's description, for a one-line
// listing.
func firstParagraph(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n\n")
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = cut(s, 297) + "..."
	}
	return s
}

// Python signatures of tools, from their input schemas: the same as the
// runner's (cellblock/_tools.py, signature), so that what the model reads
// is what help() in the jail shows.

var pyIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

var pyTypes = map[string]string{"string": "str", "integer": "int", "number": "float", "boolean": "bool",
	"array": "list", "object": "dict", "null": "None"}

// pySignature is NAME(*, a: str, b: int = ..., **arguments).
func pySignature(name string, schema json.RawMessage) string {
	var s map[string]any
	_ = json.Unmarshal(schema, &s)
	required, optional, more := pyParams(s, propertyOrder(schema))
	var parts []string
	for _, p := range required {
		parts = append(parts, p[0]+": "+p[1])
	}
	for _, p := range optional {
		parts = append(parts, p[0]+": "+p[1]+" = ...")
	}
	if len(parts) > 0 {
		parts = append([]string{"*"}, parts...)
	}
	if more {
		parts = append(parts, "**arguments")
	}
	return name + "(" + strings.Join(parts, ", ") + ")"
}

// pyParams is the runner's _params: the named parameters, and whether
// other names are passed too.
func pyParams(schema map[string]any, order []string) (required, optional [][2]string, more bool) {
	if schema == nil {
		return nil, nil, true
	}
	props, _ := schema["properties"].(map[string]any)
	req := map[string]bool{}
	if list, ok := schema["required"].([]any); ok {
		for _, r := range list {
			if s, ok := r.(string); ok {
				req[s] = true
			}
		}
	}
	extra, has := schema["additionalProperties"]
	more = len(props) == 0 || has && extra != nil && extra != false
	for _, n := range order {
		if _, ok := props[n]; !ok {
			continue
		}
		if !pyIdentifier.MatchString(n) || strings.HasPrefix(n, "_") || pythonKeyword(n) {
			more = true
			continue
		}
		p := [2]string{n, pyType(props[n])}
		if req[n] {
			required = append(required, p)
		} else {
			optional = append(optional, p)
		}
	}
	return required, optional, more
}

// propertyOrder lists the names of a schema's "properties" in the order
// the schema has them (Python's dicts keep it; Go's maps do not).
func propertyOrder(schema json.RawMessage) []string {
	dec := json.NewDecoder(bytes.NewReader(schema))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil
		}
		if k != "properties" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return nil
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return nil
		}
		var names []string
		for dec.More() {
			name, err := dec.Token()
			if err != nil {
				return names
			}
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return names
			}
			if s, ok := name.(string); ok {
				names = append(names, s)
			}
		}
		return names
	}
	return nil
}

func pythonKeyword(s string) bool {
	switch s {
	case "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
		"def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in",
		"is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield":
		return true
	}
	return false
}

// pyType is the Python type of a property's schema, as the runner's
// _type_of says it.
func pyType(v any) string {
	s, ok := v.(map[string]any)
	if !ok {
		return "Any"
	}
	if enum, ok := s["enum"].([]any); ok && len(enum) > 0 {
		var vals []string
		for i, e := range enum {
			if i == 8 {
				break
			}
			b, _ := json.Marshal(e)
			vals = append(vals, pyRepr(b))
		}
		more := ""
		if len(enum) > 8 {
			more = " | ..."
		}
		return "Literal[" + strings.Join(vals, ", ") + "]" + more
	}
	switch t := s["type"].(type) {
	case string:
		name, ok := pyTypes[t]
		if !ok {
			name = "Any"
		}
		if t == "array" {
			if items, ok := s["items"].(map[string]any); ok {
				name = "list[" + pyType(items) + "]"
			}
		}
		return name
	case []any:
		var names []string
		for _, x := range t {
			if xs, ok := x.(string); ok {
				if n, ok := pyTypes[xs]; ok {
					names = append(names, n)
				} else {
					names = append(names, "Any")
				}
			}
		}
		if len(names) > 0 {
			return strings.Join(names, " | ")
		}
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[key].([]any); ok && len(alts) > 0 {
			var names []string
			for i, a := range alts {
				if i == 6 {
					break
				}
				names = append(names, pyType(a))
			}
			return strings.Join(names, " | ")
		}
	}
	return "Any"
}

// pyRepr is Python's repr of a JSON scalar (strings in single quotes).
func pyRepr(b []byte) string {
	switch s := string(b); {
	case s == "true":
		return "True"
	case s == "false":
		return "False"
	case s == "null":
		return "None"
	case strings.HasPrefix(s, `"`):
		var str string
		_ = json.Unmarshal(b, &str)
		return "'" + strings.ReplaceAll(strings.ReplaceAll(str, `\`, `\\`), "'", `\'`) + "'"
	default:
		return s
	}
}
