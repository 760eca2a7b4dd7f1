// Package toolschema checks the arguments of tool calls (see package
// toolrelay) against the tools' input schemas, JSON Schema, at a cost the
// daemon bounds: a schema is compiled once (and cached), and refused
// when checking arguments against it could take too long (cost.go); a
// call's arguments are measured before they are checked, and refused
// when they hold a number the library would take long over or are too
// much to check (measure.go).
//
// It reads no file and opens no connection: a schema may refer only to
// itself. It holds no goroutine; where the checks run is its caller's
// choice. cellblock-mcp uses it too, to declare only the schemas the
// daemon takes.
package toolschema

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The cache of compiled input schemas. A schema compiles to about 20
// times its size in memory (and 256 KiB of it takes a third of a second
// of CPU), so the cache is bounded by the size of what it holds.
const (
	// cacheBytes bounds the sizes of the schemas cached, together:
	// some 80 MiB compiled.
	cacheBytes = 4 << 20
	// maxCachedSchema is the largest schema cached: larger ones are
	// compiled for each run that declares them.
	maxCachedSchema = 32 << 10
)

// Schema is an input schema ready to check arguments with, and what
// checking them may cost.
type Schema struct {
	schema *jsonschema.Schema
	cost   *cost
}

// ErrRefused is the error of a schema that compiles but is refused: a
// number in it, or what checking arguments against it could cost. Its
// text says why in full.
var ErrRefused = errors.New("the daemon will not check arguments against it")

// schemaCache holds compiled input schemas by the SHA-256 of their text:
// a caller (an MCP front end) declares the same tools run after run.
type schemaCache struct {
	mu    sync.Mutex
	byKey map[[32]byte]*Schema
	order []cached // oldest first
	bytes int      // the sizes of the schemas in order
}

type cached struct {
	key  [32]byte
	size int
}

var schemas = &schemaCache{byKey: map[[32]byte]*Schema{}}

// errNoRemote refuses every $ref to a document outside the schema: the
// daemon reads no file and opens no connection for a caller's schema.
var errNoRemote = errors.New("an input schema may refer only to itself (no $ref to files or URLs)")

type noLoader struct{}

func (noLoader) Load(url string) (any, error) { return nil, errNoRemote }

// Compile compiles an input schema (JSON Schema, draft 2020-12 unless its
// $schema names another, valid JSON nested at most MaxDepth deep) and
// reckons its cost. Only the metaschemas built into the library and the
// schema itself can be referred to. An error wrapping ErrRefused says
// why a schema that compiles is refused; another, why it does not
// compile.
func Compile(raw []byte) (*Schema, error) {
	key := sha256.Sum256(raw)
	if s := schemas.get(key); s != nil {
		return s, nil
	}
	if _, err := Measure(raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	const url = "mem://cellblock/input_schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, errors.New(oneLine(err.Error(), 1024))
	}
	cost, err := costOf(s)
	if err != nil {
		return nil, err
	}
	cs := &Schema{schema: s, cost: cost}
	schemas.put(key, len(raw), cs)
	return cs, nil
}

func (c *schemaCache) get(key [32]byte) *Schema {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byKey[key]
}

func (c *schemaCache) put(key [32]byte, size int, s *Schema) {
	if size > maxCachedSchema {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[key]; ok {
		return
	}
	for len(c.order) > 0 && c.bytes+size > cacheBytes {
		delete(c.byKey, c.order[0].key)
		c.bytes -= c.order[0].size
		c.order = c.order[1:]
	}
	c.byKey[key] = s
	c.order = append(c.order, cached{key, size})
	c.bytes += size
}

// Validate checks arguments (a JSON object, measured: see Measure and
// Work) against s, and says why they fail in one line.
func (s *Schema) Validate(arguments []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(arguments))
	if err != nil {
		return fmt.Errorf("the arguments are not JSON: %v", err)
	}
	if err := s.schema.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if errors.As(err, &ve) {
			return errors.New(oneLine(causes(err.Error()), 1024))
		}
		return errors.New(oneLine(err.Error(), 1024))
	}
	return nil
}

// causes is a validation error's text without its first line, which names
// the schema's internal URL: what failed where.
func causes(text string) string {
	if _, rest, ok := strings.Cut(text, "\n"); ok {
		return rest
	}
	return text
}

// oneLine joins text's lines with "; ", without the list markers the
// library puts on them, cut to n bytes on a rune boundary.
func oneLine(text string, n int) string {
	var parts []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "- "))
		if l != "" {
			parts = append(parts, l)
		}
	}
	s := strings.Join(parts, "; ")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
