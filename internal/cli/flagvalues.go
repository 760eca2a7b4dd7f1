package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cellblock/cellblock/internal/api"
)

// The values of cellblock's flags: each parses one flag's text into the
// options of a command.

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

// timeoutValue is --timeout, in milliseconds.
type timeoutValue struct{ ms *int64 }

func (v timeoutValue) String() string {
	if v.ms == nil || *v.ms == 0 {
		return ""
	}
	return formatMillis(*v.ms)
}

func (v timeoutValue) Set(s string) error {
	ms, err := parseTimeout(s)
	if err != nil {
		return err
	}
	*v.ms = ms
	return nil
}

// sizeValue is a byte count such as --memory 128M.
type sizeValue struct{ bytes *int64 }

func (v sizeValue) String() string {
	if v.bytes == nil {
		return ""
	}
	return strconv.FormatInt(*v.bytes, 10)
}

func (v sizeValue) Set(s string) error {
	b, err := parseSize(s)
	if err != nil {
		return err
	}
	*v.bytes = b
	return nil
}

// countValue is a non-negative integer such as --pids 64.
type countValue struct{ n *int64 }

func (v countValue) String() string {
	if v.n == nil {
		return ""
	}
	return strconv.FormatInt(*v.n, 10)
}

func (v countValue) Set(s string) error {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 {
		return errors.New("not a whole number such as 64")
	}
	*v.n = n
	return nil
}

// cpusValue is --cpus, in cores.
type cpusValue struct{ cpus *float64 }

func (v cpusValue) String() string {
	if v.cpus == nil {
		return ""
	}
	return formatCPUs(*v.cpus)
}

func (v cpusValue) Set(s string) error {
	c, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
		return errors.New("not a number of cores such as 0.5 or 2")
	}
	*v.cpus = c
	return nil
}

// listValue collects a repeatable flag such as --with.
type listValue struct{ list *[]string }

func (v listValue) String() string {
	if v.list == nil {
		return ""
	}
	return strings.Join(*v.list, " ")
}

func (v listValue) Set(s string) error {
	*v.list = append(*v.list, s)
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
