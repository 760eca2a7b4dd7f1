package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cellblock/cellblock/internal/api"
)

// The values of cellblock's own flags: each parses one flag's text into the
// options of a command. Sizes, durations, counts, CPU quotas and repeatable
// flags are package flagvalue's, the grammar cellblockd shares.

// codeValue is -c CODE.
type codeValue struct{ o *runOptions }

func (v *codeValue) String() string {
	if v == nil || v.o == nil {
		return ""
	}
	return v.o.code
}

func (v *codeValue) Set(s string) error {
	v.o.code, v.o.codeSet = s, true
	return nil
}

// envValue collects --env KEY=VALUE; a bare KEY takes the value from the
// client's environment and is left out when unset there, as docker -e does.
type envValue struct {
	env    *map[string]string
	lookup func(string) (string, bool)
}

func (v envValue) String() string {
	if v.env == nil {
		return ""
	}
	var kv []string
	for k, val := range *v.env {
		kv = append(kv, k+"="+val)
	}
	return strings.Join(kv, " ")
}

func (v envValue) Set(s string) error {
	key, val, ok := strings.Cut(s, "=")
	if key == "" {
		return errors.New("want KEY=VALUE or KEY")
	}
	if !ok {
		if val, ok = v.lookup(key); !ok {
			return nil
		}
	}
	if !utf8.ValidString(val) {
		return fmt.Errorf("the value of %s is not UTF-8 text", key)
	}
	if *v.env == nil {
		*v.env = make(map[string]string)
	}
	(*v.env)[key] = val
	return nil
}

// modeValue is --cell: a boolean flag that sets the request's mode.
type modeValue struct{ mode *string }

func (v modeValue) String() string {
	if v.mode != nil && *v.mode == api.ModeCell {
		return "true"
	}
	return "false"
}

func (v modeValue) Set(s string) error {
	on, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	*v.mode = api.ModeScript
	if on {
		*v.mode = api.ModeCell
	}
	return nil
}

func (modeValue) IsBoolFlag() bool { return true }

// inputValue is --input NAME=JSON.
type inputValue struct{ inputs *map[string]json.RawMessage }

func (v inputValue) String() string {
	if v.inputs == nil {
		return ""
	}
	var kv []string
	for k, val := range *v.inputs {
		kv = append(kv, k+"="+string(val))
	}
	return strings.Join(kv, " ")
}

func (v inputValue) Set(s string) error {
	name, val, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return errors.New("want NAME=JSON, such as n=3 or 'names=[\"a\", \"b\"]'")
	}
	if !json.Valid([]byte(val)) {
		return fmt.Errorf("the value of %s is not JSON (a string needs quotes: %s='\"text\"')", name, name)
	}
	if *v.inputs == nil {
		*v.inputs = make(map[string]json.RawMessage)
	}
	(*v.inputs)[name] = json.RawMessage(val)
	return nil
}
