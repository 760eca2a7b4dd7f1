package egress

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"strings"

	"github.com/cellblock/cellblock/internal/api"
)

// What the proxy does with a run's secrets.
//
// The jail holds, in each secret's variable, a placeholder: random for the
// run, shaped like a token. The value exists only in the daemon. For a
// CONNECT to a host bound to a secret the run asked for (one of the
// secret's --secret-host patterns matches the host and port as the program
// named them), the proxy terminates the program's TLS with a certificate
// of its own CA for that host, reads each request, and sends it on over
// TLS of its own to that host, verified against the host's trust store:
//
//   - the placeholder of a secret bound to the host is replaced by the
//     value in the request's header values (an Authorization: Basic
//     credential is decoded, replaced in and encoded again), and by the
//     value, query-escaped, in the URL's query; nowhere else: not in the
//     path, the body or a header's name, and not in any other encoding
//     (base64 of a placeholder, a placeholder split in pieces, stay as
//     they are);
//   - a request that carries the placeholder of a secret not bound to the
//     host (in its headers, URL or body) is refused;
//   - the response comes back with every form the proxy knows of the
//     value (valueForms) replaced, in its headers and its body, which the
//     proxy decodes first (it asks for no compression, decodes gzip and
//     deflate, and refuses any other encoding); the request goes without
//     Range, so that the filter reads the whole answer; what the filter
//     holds back of a streamed answer depends on the stream alone
//     (filter);
//   - the request must be for the host the CONNECT named (Host header,
//     absolute URL, TLS server name), so one connection cannot carry a
//     value to another host behind the same address; protocol upgrades
//     (WebSocket) are refused, as their frames would pass unread.
//
// Every other CONNECT of a run with secrets is inspected (inspect.go):
// its requests are checked for the run's placeholders as above, with
// nothing put in. A run without secrets keeps blind tunnels. A
// placeholder in a plain HTTP request, to any host, is refused: values go
// only over TLS.

// placeholderPrefix begins every placeholder.
const placeholderPrefix = "cbph_"

// placeholderAlphabet are the characters of a placeholder: letters and
// digits, which no URL, header or JSON encoding changes.
const placeholderAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// newPlaceholder is a fresh placeholder: the prefix and 40 random letters
// and digits (238 bits).
func newPlaceholder() string {
	b := make([]byte, 40)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	for i := range b {
		b[i] = placeholderAlphabet[int(b[i])%len(placeholderAlphabet)]
	}
	return placeholderPrefix + string(b)
}

// runSecret is a secret a run asked for.
type runSecret struct {
	name        string
	hosts       []api.NetPattern
	placeholder string
}

// boundTo reports whether s may go to t.
func (s *runSecret) boundTo(t target) bool {
	for _, h := range s.hosts {
		if h.Matches(t.host, t.addr, t.port) {
			return true
		}
	}
	return false
}

// valueForms are the forms in which value may come back in a response,
// each with what the program gets in its place: the value itself, URL-
// escaped (hex digits in either case), JSON-escaped (with "/" as "\/"
// or not), HTML-escaped, in hex, and in base64 (standard and URL
// alphabets).
// Base64 of the value alone becomes base64 of the placeholder; where the
// value sits at another offset of a base64 text, the characters that
// carry its bits alone become 'A's.
func valueForms(value, placeholder string, s *runSecret) []rule {
	var rules []rule
	add := func(find, repl string) {
		rules = append(rules, rule{find: []byte(find), repl: []byte(repl), secret: s})
	}
	add(value, placeholder)
	for _, esc := range []string{url.QueryEscape(value), url.PathEscape(value)} {
		add(esc, placeholder)
		add(lowerPercent(esc), placeholder) // %2f, as some encoders write it
	}
	for _, esc := range []string{jsonEscape(value, true), jsonEscape(value, false)} {
		add(esc, placeholder)
		add(strings.ReplaceAll(esc, "/", `\/`), placeholder) // PHP's json_encode
	}
	add(html.EscapeString(value), placeholder)
	add(htmlAttrEscaper.Replace(value), placeholder)
	add(hex.EncodeToString([]byte(value)), hex.EncodeToString([]byte(placeholder)))
	add(strings.ToUpper(hex.EncodeToString([]byte(value))), strings.ToUpper(hex.EncodeToString([]byte(placeholder))))
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		add(enc.EncodeToString([]byte(value)), enc.EncodeToString([]byte(placeholder)))
		for off := range 3 {
			mid := base64Middle(enc, value, off)
			add(mid, strings.Repeat("A", len(mid)))
		}
	}
	return rules
}

// htmlAttrEscaper escapes text as the encoders of HTML attributes do
// (OWASP's rule, with "/" too), besides html.EscapeString's way.
var htmlAttrEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#x27;", "/", "&#x2F;")

// lowerPercent is s with the hex digits of its percent-escapes in lower
// case.
func lowerPercent(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lowerHex(b[i+1]), lowerHex(b[i+2])
			i += 2
		}
	}
	return string(b)
}

func lowerHex(c byte) byte {
	if c >= 'A' && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

// jsonEscape is s as a JSON string has it, without the quotes.
func jsonEscape(s string, html bool) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	_ = enc.Encode(s)
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}

// base64Middle is the part of the base64 text of any bytes with value at
// offset off (mod 3) that depends on value's bits alone.
func base64Middle(enc *base64.Encoding, value string, off int) string {
	padded := make([]byte, off+len(value)+2)
	copy(padded[off:], value)
	s := enc.EncodeToString(padded)
	first := (8*off + 5) / 6           // the first character whose bits all fall in value
	last := 8 * (off + len(value)) / 6 // one past the last
	if last <= first {
		return ""
	}
	return s[first:last]
}

// hopHeaders are the hop-by-hop headers, which are the proxy's and not
// sent on (RFC 9110 section 7.6.1), with Proxy-Authorization and the ones
// the proxy sets itself.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHop removes the hop-by-hop headers from h, and those Connection
// names.
func removeHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// foundIn lists the secrets of list whose placeholder is in any of s.
func foundIn(list []*runSecret, s ...string) []*runSecret {
	var found []*runSecret
	for _, sec := range list {
		for _, x := range s {
			if strings.Contains(x, sec.placeholder) {
				found = append(found, sec)
				break
			}
		}
	}
	return found
}

// headerTexts are a header's names and values, and the credentials of
// Basic authorizations decoded, for looking for placeholders.
func headerTexts(h http.Header) []string {
	out := make([]string, 0, 2*len(h))
	for k, vs := range h {
		out = append(out, k)
		out = append(out, vs...)
		if k != "Authorization" && k != "Proxy-Authorization" {
			continue
		}
		for _, v := range vs {
			scheme, cred, _ := strings.Cut(v, " ")
			if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred)); err == nil && strings.EqualFold(scheme, "Basic") {
				out = append(out, string(raw))
			}
		}
	}
	return out
}

// requestTexts are what a request's line and headers say, for looking
// for placeholders: the headers (headerTexts), the target as sent and
// its path and query decoded, as the server reads them, and the Host.
func requestTexts(r *http.Request) []string {
	texts := append(headerTexts(r.Header), r.RequestURI, r.URL.Path, r.Host)
	if q, err := url.QueryUnescape(r.URL.RawQuery); err == nil {
		texts = append(texts, q)
	}
	return texts
}

// placeholderRules are rules that find the placeholders of list, for
// refusing a body that carries one.
func placeholderRules(list []*runSecret) []rule {
	rules := make([]rule, 0, len(list))
	for _, s := range list {
		rules = append(rules, rule{find: []byte(s.placeholder), secret: s})
	}
	return rules
}

// injectHeader replaces, in one header value, the placeholders of bound
// by their values (value gives each one's), and in an Authorization:
// Basic credential the placeholders it carries once decoded. It returns
// the new value, the secrets it used, and for a Basic credential the
// pair (credential sent, credential the program wrote) for the
// response's filter.
func injectHeader(name, v string, bound []*runSecret, value func(*runSecret) string) (string, []*runSecret, *rule) {
	var used []*runSecret
	for _, s := range bound {
		if strings.Contains(v, s.placeholder) {
			v = strings.ReplaceAll(v, s.placeholder, value(s))
			used = append(used, s)
		}
	}
	if !strings.EqualFold(name, "Authorization") {
		return v, used, nil
	}
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return v, used, nil
	}
	cred = strings.TrimSpace(cred)
	raw, err := base64.StdEncoding.DecodeString(cred)
	if err != nil || !strings.Contains(string(raw), ":") {
		return v, used, nil
	}
	text := string(raw)
	var basic []*runSecret
	for _, s := range bound {
		if strings.Contains(text, s.placeholder) {
			text = strings.ReplaceAll(text, s.placeholder, value(s))
			basic = append(basic, s)
		}
	}
	if len(basic) == 0 {
		return v, used, nil
	}
	sent := base64.StdEncoding.EncodeToString([]byte(text))
	return scheme + " " + sent, append(used, basic...), &rule{find: []byte(sent), repl: []byte(cred), secret: basic[0]}
}

// injectQuery replaces, in a raw query, the placeholders of bound by
// their values, query-escaped.
func injectQuery(q string, bound []*runSecret, value func(*runSecret) string) (string, []*runSecret) {
	var used []*runSecret
	for _, s := range bound {
		if strings.Contains(q, s.placeholder) {
			q = strings.ReplaceAll(q, s.placeholder, url.QueryEscape(value(s)))
			used = append(used, s)
		}
	}
	return q, used
}
