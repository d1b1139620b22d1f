package plugin

import (
	"encoding/json"
	"unicode/utf8"
)

// Most calls pass a few scalars ({"a": 40, "b": 2}): for those, a general
// JSON decoder (a Decoder, a map, a boxed value per element) costs more than
// the call itself. scanFlat reads exactly that shape — an object or array
// whose values are numbers, true, false or strings without escapes — into
// the values the decoder would have made (json.Number, bool, string), and
// reports !ok for anything else, which then takes the general path; so the
// two agree on every input the fast one accepts, errors included (it
// accepts nothing the decoder would refuse).

// flatArgs is what scanFlat read: names[i] is values[i]'s key (none for
// an array).
type flatArgs struct {
	array  bool
	names  []string
	values []any
}

func scanFlat(raw []byte) (flatArgs, bool) {
	f := flatArgs{names: make([]string, 0, 4), values: make([]any, 0, 4)}
	i := skipSpace(raw, 0)
	if i == len(raw) || raw[i] != '{' && raw[i] != '[' {
		return f, false
	}
	f.array = raw[i] == '['
	end := byte('}')
	if f.array {
		end = ']'
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == end {
		return f, skipSpace(raw, i+1) == len(raw)
	}
	for {
		if !f.array {
			k, j, ok := plainString(raw, i)
			if !ok {
				return f, false
			}
			j = skipSpace(raw, j)
			if j == len(raw) || raw[j] != ':' {
				return f, false
			}
			f.names = append(f.names, k)
			i = skipSpace(raw, j+1)
		}
		v, j, ok := scalar(raw, i)
		if !ok {
			return f, false
		}
		f.values = append(f.values, v)
		i = skipSpace(raw, j)
		switch {
		case i < len(raw) && raw[i] == ',':
			i = skipSpace(raw, i+1)
		case i < len(raw) && raw[i] == end:
			return f, skipSpace(raw, i+1) == len(raw)
		default:
			return f, false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scalar reads a number, true, false or a plain string at b[i:].
func scalar(b []byte, i int) (any, int, bool) {
	if i == len(b) {
		return nil, i, false
	}
	switch c := b[i]; {
	case c == '"':
		return plainString(b, i)
	case c == 't' && hasWord(b, i, "true"):
		return true, i + 4, true
	case c == 'f' && hasWord(b, i, "false"):
		return false, i + 5, true
	case c == '-' || c >= '0' && c <= '9':
		j, ok := number(b, i)
		if !ok {
			return nil, i, false
		}
		return json.Number(b[i:j]), j, true
	}
	return nil, i, false
}

func hasWord(b []byte, i int, w string) bool {
	return len(b)-i >= len(w) && string(b[i:i+len(w)]) == w
}

// plainString reads a string at b[i:] with no escape and no control
// character, in valid UTF-8: one the decoder would return byte for byte.
func plainString(b []byte, i int) (string, int, bool) {
	if i == len(b) || b[i] != '"' {
		return "", i, false
	}
	ascii := true
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			s := b[i+1 : j]
			if !ascii && !utf8.Valid(s) {
				return "", i, false
			}
			return string(s), j + 1, true
		case c == '\\' || c < 0x20:
			return "", i, false
		case c >= 0x80:
			ascii = false
		}
	}
	return "", i, false
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
