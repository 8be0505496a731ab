package tailorctx

import "strings"

const (
	// BaggageHeader is the W3C baggage header (and gRPC metadata key).
	BaggageHeader = "baggage"
	// BaggageKey is our list-member's key.
	BaggageKey = "tailor"
	// MaxBaggageLen is the longest baggage read: what W3C Baggage requires every platform to propagate.
	MaxBaggageLen = 8192
)

func isOWS(b byte) bool { return b == ' ' || b == '\t' }

func trimOWS(s string) string {
	i, j := 0, len(s)
	for i < j && isOWS(s[i]) {
		i++
	}
	for j > i && isOWS(s[j-1]) {
		j--
	}
	return s[i:j]
}

// ourValue: whether a trimmed list-member is ours (key "tailor", then OWS,
// then "="); if so its raw value, properties and surrounding OWS removed.
func ourValue(member string) (string, bool) {
	if !strings.HasPrefix(member, BaggageKey) {
		return "", false
	}
	value := trimOWS(member[len(BaggageKey):])
	if !strings.HasPrefix(value, "=") {
		return "", false
	}
	value, _, _ = strings.Cut(value[1:], ";")
	return trimOWS(value), true
}

// scan counts our members in one baggage value and returns the first one's raw value.
func scan(header string) (count int, first string) {
	for rest, more := header, true; more; {
		var m string
		m, rest, more = strings.Cut(rest, ",")
		if v, ok := ourValue(trimOWS(m)); ok {
			if count == 0 {
				first = v
			}
			count++
		}
	}
	return count, first
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// percentDecode decodes %XX escapes (W3C Baggage: receivers decode); a % not
// followed by two hex digits stays literal (and then fails as invalid_char).
// More than MaxLen decoded bytes is ErrTooLong.
func percentDecode(raw string) (string, error) {
	if !strings.Contains(raw, "%") {
		if len(raw) > MaxLen {
			return "", ErrTooLong
		}
		return raw, nil
	}
	out := make([]byte, 0, MaxLen)
	for i := 0; i < len(raw); {
		b, step := raw[i], 1
		if b == '%' && i+2 < len(raw) {
			if hi, ok := unhex(raw[i+1]); ok {
				if lo, ok := unhex(raw[i+2]); ok {
					b, step = hi<<4|lo, 3
				}
			}
		}
		if len(out) == MaxLen {
			return "", ErrTooLong
		}
		out = append(out, b)
		i += step
	}
	return string(out), nil
}

// DecodeBaggage is the context in one baggage header value, if it has a
// tailor member (found). Errors: ErrTooLong (header over 8192 bytes, or the
// member over 128 once percent-decoded), ErrAmbiguous (two members of ours),
// and whatever Decode rejects in the member's value.
func DecodeBaggage(header string) (d Decoded, found bool, err error) {
	if len(header) > MaxBaggageLen {
		return Decoded{}, false, ErrTooLong
	}
	count, raw := scan(header)
	return decodeMember(count, raw)
}

// decodeMember turns the outcome of scanning one or more baggage headers
// (how many tailor members, and the first one's raw value) into a context.
func decodeMember(count int, raw string) (Decoded, bool, error) {
	switch count {
	case 0:
		return Decoded{}, false, nil
	case 1:
		v, err := percentDecode(raw)
		if err != nil {
			return Decoded{}, true, err
		}
		d, err := Decode(v)
		return d, true, err
	default:
		return Decoded{}, true, ErrAmbiguous
	}
}

// members: trimmed, non-empty list-members, each with whether it is ours.
func members(header string, f func(m string, ours bool)) {
	for rest, more := header, true; more; {
		var m string
		m, rest, more = strings.Cut(rest, ",")
		if m = trimOWS(m); m != "" {
			_, ours := ourValue(m)
			f(m, ours)
		}
	}
}

// BaggageWith is header (the outgoing baggage, "" if none) with our member set
// to value and every other member kept, in order. Ours takes the place of the
// first tailor member there was (others of ours are dropped), or goes last.
// With several baggage headers, join them with "," first.
func BaggageWith(header, value string) string {
	var out []string
	placed := false
	members(header, func(m string, ours bool) {
		switch {
		case ours && placed:
		case ours:
			out, placed = append(out, BaggageKey+"="+value), true
		default:
			out = append(out, m)
		}
	})
	if !placed {
		out = append(out, BaggageKey+"="+value)
	}
	return strings.Join(out, ",")
}

// BaggageWithout is header without our member: what the edge forwards after
// stripping an incoming context. "" when nothing is left (drop the header).
func BaggageWithout(header string) string {
	var out []string
	members(header, func(m string, ours bool) {
		if !ours {
			out = append(out, m)
		}
	})
	return strings.Join(out, ",")
}

// Extract is the context a request carries. values returns every value of a
// header (or metadata key) by lower-case name, case-insensitively: pass
// r.Header.Values for HTTP, md.Get for gRPC metadata.
//
// The tailor-context header wins when present (more than one is
// ErrAmbiguous); otherwise the tailor member of baggage, all baggage values
// being one list of at most 8192 bytes with at most one member of ours.
// found is false when the request carries no context: not an error.
func Extract(values func(name string) []string) (d Decoded, found bool, err error) {
	switch vs := values(Header); len(vs) {
	case 0:
	case 1:
		if len(vs[0]) > MaxLen {
			return Decoded{}, true, ErrTooLong
		}
		d, err := Decode(vs[0])
		return d, true, err
	default:
		return Decoded{}, true, ErrAmbiguous
	}
	lines := values(BaggageHeader)
	total, count, first := 0, 0, ""
	for i, line := range lines {
		total += len(line)
		if i > 0 {
			total++ // the "," that joins lines
		}
		if total > MaxBaggageLen {
			return Decoded{}, true, ErrTooLong
		}
		n, raw := scan(line)
		if count == 0 && n > 0 {
			first = raw
		}
		count += n
	}
	return decodeMember(count, first)
}
