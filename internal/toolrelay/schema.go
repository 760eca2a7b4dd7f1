package toolrelay

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// maxSchemas bounds the cache of compiled input schemas.
const maxSchemas = 512

// schemaCache holds compiled input schemas by the SHA-256 of their text:
// a caller (an MCP front end) declares the same tools run after run.
type schemaCache struct {
	mu    sync.Mutex
	byKey map[[32]byte]*jsonschema.Schema
	order [][32]byte
}

var schemas = &schemaCache{byKey: map[[32]byte]*jsonschema.Schema{}}

// errNoRemote refuses every $ref to a document outside the schema: the
// daemon reads no file and opens no connection for a caller's schema.
var errNoRemote = errors.New("an input schema may refer only to itself (no $ref to files or URLs)")

type noLoader struct{}

func (noLoader) Load(url string) (any, error) { return nil, errNoRemote }

// compileSchema compiles an input schema (JSON Schema, draft 2020-12 unless
// its $schema names another). Only the metaschemas built into the library
// and the schema itself can be referred to.
func compileSchema(raw []byte) (*jsonschema.Schema, error) {
	key := sha256.Sum256(raw)
	if s := schemas.get(key); s != nil {
		return s, nil
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
	schemas.put(key, s)
	return s, nil
}

func (c *schemaCache) get(key [32]byte) *jsonschema.Schema {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byKey[key]
}

func (c *schemaCache) put(key [32]byte, s *jsonschema.Schema) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[key]; ok {
		return
	}
	if len(c.order) >= maxSchemas {
		delete(c.byKey, c.order[0])
		c.order = c.order[1:]
	}
	c.byKey[key] = s
	c.order = append(c.order, key)
}

// validate checks arguments (a JSON object) against s, and says why they
// fail in one line.
func validate(s *jsonschema.Schema, arguments []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(arguments))
	if err != nil {
		return fmt.Errorf("the arguments are not JSON: %v", err)
	}
	if err := s.Validate(v); err != nil {
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
// library puts on them, cut to n bytes.
func oneLine(text string, n int) string {
	var parts []string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "- "))
		if l != "" {
			parts = append(parts, l)
		}
	}
	return cut(strings.Join(parts, "; "), n)
}
