package plugin

import (
	"encoding/json"
	"unicode/utf8"
)

// Most calls pass a few scalars ({"a": 40, "b": 2}): for those, a general
// JSON decoder (a Decoder, a map, a boxed value per element) costs more than
// the call itself. scanFlat reads exactly that shape — an object or array
// whose values are numbers, true, false or strings without escapes, at most
// maxFlat of them — into tokens that point into the input and read as the
// values the decoder would have made (token.value), and reports !ok for
// anything else, which then takes the general path; so the two agree on
// every input the fast one accepts, errors included (it accepts nothing the
// decoder would refuse). Args converts the commonest tokens without boxing
// them (quickVal), and the rest through fromJSON as the decoder's values.

// maxFlat is the most arguments scanFlat reads; more take the general path.
const maxFlat = 8

// flatArgs is what scanFlat read: names[i] is toks[i]'s key (none for an
// array). Both point into the input, so reading it allocates nothing.
type flatArgs struct {
	array bool
	n     int
	names [maxFlat][]byte
	toks  [maxFlat]token
}

// token is one scalar: a string ('"', b its content), a number ('n', b its
// text), true ('t') or false ('f').
type token struct {
	kind byte
	b    []byte
}

// value is t as the decoder reads it (the form fromJSON takes).
func (t token) value() any {
	switch t.kind {
	case 't':
		return true
	case 'f':
		return false
	case 'n':
		return json.Number(t.b)
	}
	return string(t.b)
}

// scanFlat reads raw into f, reporting whether it has the flat shape.
func scanFlat(raw []byte, f *flatArgs) bool {
	i := skipSpace(raw, 0)
	if i == len(raw) || raw[i] != '{' && raw[i] != '[' {
		return false
	}
	f.array = raw[i] == '['
	end := byte('}')
	if f.array {
		end = ']'
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == end {
		return skipSpace(raw, i+1) == len(raw)
	}
	for ; f.n < maxFlat; f.n++ {
		if !f.array {
			k, j, ok := plainString(raw, i)
			if !ok {
				return false
			}
			j = skipSpace(raw, j)
			if j == len(raw) || raw[j] != ':' {
				return false
			}
			f.names[f.n] = k
			i = skipSpace(raw, j+1)
		}
		t, j, ok := scalar(raw, i)
		if !ok {
			return false
		}
		f.toks[f.n] = t
		i = skipSpace(raw, j)
		switch {
		case i < len(raw) && raw[i] == ',':
			i = skipSpace(raw, i+1)
		case i < len(raw) && raw[i] == end:
			f.n++
			return skipSpace(raw, i+1) == len(raw)
		default:
			return false
		}
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scalar reads a number, true, false or a plain string at b[i:].
func scalar(b []byte, i int) (token, int, bool) {
	if i == len(b) {
		return token{}, i, false
	}
	switch c := b[i]; {
	case c == '"':
		s, j, ok := plainString(b, i)
		return token{'"', s}, j, ok
	case c == 't' && hasWord(b, i, "true"):
		return token{kind: 't'}, i + 4, true
	case c == 'f' && hasWord(b, i, "false"):
		return token{kind: 'f'}, i + 5, true
	case c == '-' || c >= '0' && c <= '9':
		j, ok := number(b, i)
		return token{'n', b[i:j]}, j, ok
	}
	return token{}, i, false
}

func hasWord(b []byte, i int, w string) bool {
	return len(b)-i >= len(w) && string(b[i:i+len(w)]) == w
}

// plainString reads a string at b[i:] with no escape and no control
// character, in valid UTF-8: one the decoder would read byte for byte. It
// returns the string's content.
func plainString(b []byte, i int) ([]byte, int, bool) {
	if i == len(b) || b[i] != '"' {
		return nil, i, false
	}
	ascii := true
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s := b[i+1 : j]
			if !ascii && !utf8.Valid(s) {
				return nil, i, false
			}
			return s, j + 1, true
		case c == '\\' || c < 0x20:
			return nil, i, false
		case c >= 0x80:
			ascii = false
		}
	}
	return nil, i, false
}

// number reads a JSON number (RFC 8259's grammar) at b[i:].
func number(b []byte, i int) (int, bool) {
	digits := func(j int) int {
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		return j
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(i)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return i, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(i)
		if j == i {
			return i, false
		}
		i = j
	}
	return i, true
}
