package toolschema

import (
	"fmt"
	"strconv"
)

// Measuring a call's arguments, which come from the jail, before the
// schema library sees them.

const (
	// maxNumberDigits and maxNumberExponent bound a number of the
	// arguments: the library makes an exact fraction of each number it
	// compares, and 1e999999 takes it 20 ms.
	maxNumberDigits   = 1000
	maxNumberExponent = 400
	// bytesPerUnit is how many bytes of a string, a number or a
	// property's name cost about as much to check (against a pattern,
	// as an exact fraction) as one value.
	bytesPerUnit = 16
	// MaxWork bounds the work of checking one call's arguments,
	// in evaluations of a subschema on one value (300 to 600 ns each
	// on a 2020s server core): a second or two of one core at most.
	// 8 MiB of small numbers checked against one subschema each is
	// under a million.
	MaxWork = 1 << 22
)

// Shape is what Measure found in a call's arguments, by depth below the
// arguments object (at depth 0).
type Shape struct {
	// count is the values at each depth, and the properties or items
	// of the objects and arrays there.
	count [maxCostDepth + 1]int64
	// bytes is the bytes of the strings, numbers and property names at
	// each depth.
	bytes [maxCostDepth + 1]int64
}

// Measure reads args, valid JSON nested at most MaxDepth deep (the
// runner's ParseToolCall checks both of arguments), and refuses a number
// the daemon does not pass on: one that is not a finite 64-bit float, has
// more than maxNumberDigits digits or an exponent beyond
// ±maxNumberExponent.
func Measure(args []byte) (Shape, error) {
	var sh Shape
	level := 0 // the depth of the next value: how many containers are open
	value := func(n int64) {
		d := min(max(level, 0), maxCostDepth) // in range whatever args are
		sh.count[d]++
		sh.bytes[d] += n
		if d > 0 {
			sh.count[d-1]++ // a property or item of its container
		}
	}
	for i := 0; i < len(args); {
		switch c := args[i]; {
		case c == '{' || c == '[':
			value(0)
			level++
			i++
		case c == '}' || c == ']':
			level--
			i++
		case c == '"':
			end := stringEnd(args, i)
			if isKey(args, end) {
				sh.bytes[min(max(level, 0), maxCostDepth)] += int64(end - i)
			} else {
				value(int64(end - i))
			}
			i = end
		case c == '-' || c >= '0' && c <= '9':
			end := i + 1
			for end < len(args) && isNumberByte(args[end]) {
				end++
			}
			if err := checkNumber(args[i:end]); err != nil {
				return sh, err
			}
			value(int64(end - i))
			i = end
		case c == 't' || c == 'f' || c == 'n':
			value(0)
			for i < len(args) && args[i] >= 'a' && args[i] <= 'z' {
				i++
			}
		default: // space, ',' and ':'
			i++
		}
	}
	return sh, nil
}

// stringEnd is the index just past the string that starts at args[i].
func stringEnd(args []byte, i int) int {
	for j := i + 1; j < len(args); j++ {
		switch args[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(args)
}

// isKey reports whether the string that ended at args[end] is a
// property's name: a ':' follows it.
func isKey(args []byte, end int) bool {
	for ; end < len(args); end++ {
		switch args[end] {
		case ' ', '\t', '\r', '\n':
		case ':':
			return true
		default:
			return false
		}
	}
	return false
}

func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// checkNumber checks one number token of valid JSON.
func checkNumber(tok []byte) error {
	digits, exp, expDigits, inExp := 0, 0, 0, false
	for _, c := range tok {
		switch {
		case c == 'e' || c == 'E':
			inExp = true
		case c < '0' || c > '9':
		case !inExp:
			digits++
		case exp > 0 || c != '0':
			// Leading zeros of the exponent count for nothing.
			expDigits++
			if expDigits <= 6 {
				exp = exp*10 + int(c-'0')
			}
		}
	}
	var err error
	if digits+exp > 300 { // else well within a float64's range
		_, err = strconv.ParseFloat(string(tok), 64)
	}
	if digits > maxNumberDigits || exp > maxNumberExponent || err != nil {
		shown := string(tok)
		if len(shown) > 40 {
			shown = shown[:40] + "..."
		}
		return fmt.Errorf("the number %s is beyond what the daemon checks: a number must be a finite 64-bit float, written with at most %d digits and an exponent within ±%d",
			shown, maxNumberDigits, maxNumberExponent)
	}
	return nil
}

// Work estimates what checking arguments of shape sh against s takes, in
// evaluations of a subschema on one value: each value's evaluations at
// its depth, weighted by its size, and for subschemas with uniqueItems
// the whole of what lies below.
func (s *Schema) Work(sh *Shape) int64 {
	c := s.cost
	var total, below int64
	for d := maxCostDepth; d >= 0; d-- {
		units := sh.count[d] + sh.bytes[d]/bytesPerUnit
		below = addSat(below, units)
		total = addSat(total, mulSat(c.evals[d], units))
		total = addSat(total, mulSat(c.unique[d], below))
	}
	return total
}

// Admit measures arguments and says why they are not to be checked
// against s (nil: only their numbers are looked at), or nil.
func Admit(s *Schema, arguments []byte) error {
	sh, err := Measure(arguments)
	if err != nil || s == nil {
		return err
	}
	if w := s.Work(&sh); w > MaxWork {
		return fmt.Errorf("they are too much to check against the input schema: an estimated %s evaluations of its subschemas, the most is %d; pass less", countText(w), MaxWork)
	}
	return nil
}
