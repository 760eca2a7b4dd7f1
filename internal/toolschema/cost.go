package toolschema

import (
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The cost of checking arguments against an input schema. The library
// evaluates every subschema that applies to a value, without memo: a
// schema whose allOf, anyOf or oneOf refer (directly or down a chain of
// $refs) to subschemas that apply more than one further subschema to the
// same value, or to its items, can ask for a number of evaluations that
// grows exponentially with the depth of the arguments, from a schema of a
// few hundred bytes. So every compiled schema gets a cost: for each depth
// d of a value below the arguments object, the most subschema
// evaluations one value at depth d can get (E[d]), counted down the
// schema graph by the rules of the keywords (a property gets its
// "properties" subschema or "additionalProperties", every
// "patternProperties" that matches, ...). Prepare refuses a schema whose
// cost is over MaxEvaluations at some depth, and each call's arguments
// are measured (measure) and refused when their estimated work is over
// MaxWork, before the library sees them.

const (
	// MaxDepth is how deep arguments may nest (the runner's bound,
	// runner.MaxJSONDepth): counted from the arguments object (depth
	// 0), its innermost containers hold values MaxDepth deep.
	MaxDepth = 64
	// maxCostDepth is the deepest depth a value has.
	maxCostDepth = MaxDepth
	// MaxEvaluations bounds E[d] of a schema at every depth.
	MaxEvaluations = 1 << 16
	// saturated is where the counts stop growing.
	saturated = int64(1) << 50
)

// cost is what checking arguments against one compiled schema may
// cost, by depth below the arguments object.
type cost struct {
	// evals[d] bounds the evaluations of one value at depth d, each
	// weighted by what it may do with the value itself (the entries of
	// an enum it is compared with, the properties it looks up).
	evals [maxCostDepth + 1]int64
	// unique[d] bounds the evaluations, at depth d, of subschemas with
	// uniqueItems: each reads the value's whole subtree.
	unique [maxCostDepth + 1]int64
}

// errSchemaLoop refuses a schema that applies itself to the same value
// again, through $ref and the applicators, without going down into it.
var errSchemaLoop = fmt.Errorf("%w: it refers back to itself on the same value (a $ref loop through allOf, anyOf, oneOf, not, if/then/else or dependentSchemas that never goes down into a property or an item)", ErrRefused)

// costOf computes root's cost, and refuses a schema that loops on one
// value or whose cost is over MaxEvaluations.
func costOf(root *jsonschema.Schema) (*cost, error) {
	g := newSchemaGraph(root)
	order, err := g.sameOrder()
	if err != nil {
		return nil, err
	}
	c := &cost{}
	c.evals = g.count(order, root, weight)
	c.unique = g.count(order, root, func(s *jsonschema.Schema) int64 {
		if s.UniqueItems {
			return 1
		}
		return 0
	})
	for d, n := range c.evals {
		if n > MaxEvaluations {
			return nil, fmt.Errorf("%w: one value %d deep in them could take up to %s evaluations of its subschemas (and comparisons with enum entries), the most is %d "+
				"(allOf, anyOf or oneOf whose branches lead, by $ref, to more than one subschema again at each level make the work grow exponentially)",
				ErrRefused, d, countText(n), MaxEvaluations)
		}
	}
	return c, nil
}

// weight is what one evaluation of s may cost besides its subschemas.
func weight(s *jsonschema.Schema) int64 {
	w := int64(1) + int64(len(s.Properties)+len(s.Required)+len(s.DependentRequired)+len(s.DependentSchemas)+len(s.Dependencies))
	if s.Enum != nil {
		w += int64(len(s.Enum.Values))
	}
	if s.Const != nil {
		w++
	}
	return w
}

func countText(n int64) string {
	if n >= saturated {
		return "more than 10^15"
	}
	return fmt.Sprint(n)
}

// schemaGraph is the subschemas reachable from a root, and which apply
// to the same value as their parent (same) or to its properties and
// items (the keywords, read in count).
type schemaGraph struct {
	nodes []*jsonschema.Schema
	index map[*jsonschema.Schema]int
	same  [][]int
}

func newSchemaGraph(root *jsonschema.Schema) *schemaGraph {
	g := &schemaGraph{index: map[*jsonschema.Schema]int{}}
	var visit func(s *jsonschema.Schema)
	visit = func(s *jsonschema.Schema) {
		if s == nil {
			return
		}
		if _, ok := g.index[s]; ok {
			return
		}
		g.index[s] = len(g.nodes)
		g.nodes = append(g.nodes, s)
		for _, t := range sameValue(s) {
			visit(t)
		}
		for _, t := range childValues(s) {
			visit(t)
		}
	}
	visit(root)
	// $dynamicRef and $recursiveRef resolve at validation time to any
	// schema in scope with the anchor: all of those that can be reached.
	dynamic := map[string][]int{}
	var recursive []int
	for i, s := range g.nodes {
		if s.DynamicAnchor != "" {
			dynamic[s.DynamicAnchor] = append(dynamic[s.DynamicAnchor], i)
		}
		if s.RecursiveAnchor {
			recursive = append(recursive, i)
		}
	}
	g.same = make([][]int, len(g.nodes))
	for i, s := range g.nodes {
		for _, t := range sameValue(s) {
			g.same[i] = append(g.same[i], g.index[t])
		}
		if s.DynamicRef != nil && s.DynamicRef.Anchor != "" {
			g.same[i] = append(g.same[i], dynamic[s.DynamicRef.Anchor]...)
		}
		if s.RecursiveRef != nil && s.RecursiveRef.RecursiveAnchor {
			g.same[i] = append(g.same[i], recursive...)
		}
	}
	return g
}

// sameValue are the subschemas s applies to the value it checks.
func sameValue(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else}
	if s.DynamicRef != nil {
		out = append(out, s.DynamicRef.Ref)
	}
	out = append(out, s.AllOf...)
	out = append(out, s.AnyOf...)
	out = append(out, s.OneOf...)
	for _, t := range s.DependentSchemas {
		out = append(out, t)
	}
	for _, v := range s.Dependencies {
		if t, ok := v.(*jsonschema.Schema); ok {
			out = append(out, t)
		}
	}
	return nonNil(out)
}

// childValues are the subschemas s applies to properties and items.
func childValues(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.PropertyNames, s.UnevaluatedProperties, s.Items2020, s.Contains, s.UnevaluatedItems, schemaOf(s.AdditionalProperties), schemaOf(s.AdditionalItems)}
	for _, t := range s.Properties {
		out = append(out, t)
	}
	for _, t := range s.PatternProperties {
		out = append(out, t)
	}
	out = append(out, s.PrefixItems...)
	switch items := s.Items.(type) {
	case *jsonschema.Schema:
		out = append(out, items)
	case []*jsonschema.Schema:
		out = append(out, items...)
	}
	return nonNil(out)
}

func schemaOf(v any) *jsonschema.Schema {
	s, _ := v.(*jsonschema.Schema)
	return s
}

func nonNil(list []*jsonschema.Schema) []*jsonschema.Schema {
	out := list[:0]
	for _, s := range list {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// sameOrder orders the nodes so that each comes after every node it
// applies to its own value; errSchemaLoop when that is a loop.
func (g *schemaGraph) sameOrder() ([]int, error) {
	const (
		unseen = iota
		open
		done
	)
	state := make([]int, len(g.nodes))
	order := make([]int, 0, len(g.nodes))
	// Iterative depth-first search: a schema's chain of $refs may be as
	// long as its number of subschemas.
	type frame struct{ node, next int }
	for start := range g.nodes {
		if state[start] != unseen {
			continue
		}
		stack := []frame{{start, 0}}
		state[start] = open
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			if top.next < len(g.same[top.node]) {
				t := g.same[top.node][top.next]
				top.next++
				switch state[t] {
				case open:
					return nil, errSchemaLoop
				case unseen:
					state[t] = open
					stack = append(stack, frame{t, 0})
				}
				continue
			}
			state[top.node] = done
			order = append(order, top.node)
			stack = stack[:len(stack)-1]
		}
	}
	return order, nil
}

// count computes, for root, the evaluations by depth that w weighs: a
// node's count at depth 0 is its own weight and its same-value
// subschemas' counts; at depth d its same-value subschemas' counts at d
// and what the subschemas of its properties or items count at d-1.
func (g *schemaGraph) count(order []int, root *jsonschema.Schema, w func(*jsonschema.Schema) int64) [maxCostDepth + 1]int64 {
	prev := make([]int64, len(g.nodes))
	cur := make([]int64, len(g.nodes))
	var out [maxCostDepth + 1]int64
	at := func(level []int64, s *jsonschema.Schema) int64 {
		if s == nil {
			return 0
		}
		return level[g.index[s]]
	}
	for d := 0; d <= maxCostDepth; d++ {
		for _, i := range order {
			s := g.nodes[i]
			var n int64
			if d == 0 {
				n = w(s)
			} else if s.Bool == nil {
				n = max(objectChild(s, prev, at, d), arrayChild(s, prev, at))
			}
			for _, t := range g.same[i] {
				n = addSat(n, cur[t])
			}
			cur[i] = n
		}
		out[d] = cur[g.index[root]]
		prev, cur = cur, prev
	}
	return out
}

// objectChild is what one property of an object checked by s gets from
// the subschemas of s at the depth before (prev): the property's own
// subschema or additionalProperties, every patternProperties (each
// regexp is tried on its name), propertyNames and unevaluatedProperties.
func objectChild(s *jsonschema.Schema, prev []int64, at func([]int64, *jsonschema.Schema) int64, d int) int64 {
	var one int64
	for _, t := range s.Properties {
		one = max(one, at(prev, t))
	}
	n := max(one, at(prev, schemaOf(s.AdditionalProperties)))
	for _, t := range s.PatternProperties {
		n = addSat(n, at(prev, t))
	}
	if d == 1 {
		n = addSat(n, int64(len(s.PatternProperties)))
	}
	n = addSat(n, at(prev, s.PropertyNames))
	return addSat(n, at(prev, s.UnevaluatedProperties))
}

// arrayChild is objectChild for one item of an array: its prefixItems or
// items subschema (or additionalItems), contains and unevaluatedItems.
func arrayChild(s *jsonschema.Schema, prev []int64, at func([]int64, *jsonschema.Schema) int64) int64 {
	var one int64
	for _, t := range s.PrefixItems {
		one = max(one, at(prev, t))
	}
	one = max(one, at(prev, s.Items2020), at(prev, schemaOf(s.AdditionalItems)))
	switch items := s.Items.(type) {
	case *jsonschema.Schema:
		one = max(one, at(prev, items))
	case []*jsonschema.Schema:
		for _, t := range items {
			one = max(one, at(prev, t))
		}
	}
	n := addSat(one, at(prev, s.Contains))
	return addSat(n, at(prev, s.UnevaluatedItems))
}

// addSat is a+b, stopping at saturated.
func addSat(a, b int64) int64 {
	if a+b > saturated || a+b < 0 {
		return saturated
	}
	return a + b
}

// mulSat is a*b (both at least 0), stopping at saturated.
func mulSat(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > saturated/b {
		return saturated
	}
	return a * b
}
