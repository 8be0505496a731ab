package tailorctx

import (
	"math"
	"strconv"
	"strings"
)

// Version is the version this codec writes and the only one it reads.
const Version = 1

// MaxLen is the longest context value accepted, in bytes. The longest
// canonical value is 109 bytes; the cap bounds what a hostile value costs.
const MaxLen = 128

// Header is the dedicated HTTP header and gRPC metadata key.
const Header = "tailor-context"

// Never is "no deadline": it sorts after every real deadline.
const Never uint64 = math.MaxUint64

// Context is what travels with a request: {GAT, deadline, class, fanout, hop}.
type Context struct {
	// GAT is the global arrival time, stamped once at the edge (ns, edge clock).
	GAT uint64
	// Deadline is when the task must leave its queue (TailGuard's t_D), or Never.
	Deadline uint64
	// Class is the SLO class; 0 is the most stringent.
	Class uint8
	// Fanout is the number of parallel tasks in the query (1 = none).
	Fanout uint32
	// Hop counts hops since the edge (the edge is hop 0).
	Hop uint8
}

// Stamped is the context the edge stamps at gat: no deadline, class 0, fanout 1, hop 0.
func Stamped(gat uint64) Context {
	return Context{GAT: gat, Deadline: Never, Fanout: 1}
}

// Child is the context an outgoing call inherits: one hop further (saturating).
func (c Context) Child() Context {
	if c.Hop < math.MaxUint8 {
		c.Hop++
	}
	return c
}

// Age is now − GAT, or 0 if now precedes the GAT.
func (c Context) Age(now uint64) uint64 {
	if now < c.GAT {
		return 0
	}
	return now - c.GAT
}

// isValueByte: RFC 3986 unreserved, A-Z a-z 0-9 - . _ ~.
func isValueByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '.' || b == '_' || b == '~'
}

// Encode is the canonical encoding of c, unsigned. Every Context has one.
func Encode(c Context) string {
	var b [MaxLen]byte
	return string(appendContext(b[:0], c))
}

func appendContext(b []byte, c Context) []byte {
	b = append(b, '1')
	b = appendField(b, 'g', c.GAT)
	if c.Deadline != Never {
		b = appendField(b, 'd', c.Deadline)
	}
	b = appendField(b, 'c', uint64(c.Class))
	b = appendField(b, 'k', uint64(c.Fanout))
	return appendField(b, 'h', uint64(c.Hop))
}

func appendField(b []byte, key byte, n uint64) []byte {
	return strconv.AppendUint(append(b, '.', key), n, 10)
}

// Decoded is a context as read off the wire, with its MAC fields if signed.
type Decoded struct {
	// Context is not yet clamped: pass it through Clamp before use.
	Context Context
	// Signed says whether KeyID and Tag are set. They are not verified: see Verify.
	Signed bool
	KeyID  string
	Tag    [TagLen]byte
}

// Encode gives back the exact bytes d was decoded from (decoding is canonical).
func (d Decoded) Encode() string {
	if !d.Signed {
		return Encode(d.Context)
	}
	return withTag(signedPrefix(d.Context, d.KeyID), d.Tag)
}

const (
	fGAT = iota
	fDeadline
	fClass
	fFanout
	fHop
	fKeyID
	fTag
)

const required = 1<<fGAT | 1<<fClass | 1<<fFanout | 1<<fHop

func fieldOf(key byte) int {
	switch key {
	case 'g':
		return fGAT
	case 'd':
		return fDeadline
	case 'c':
		return fClass
	case 'k':
		return fFanout
	case 'h':
		return fHop
	case 'i':
		return fKeyID
	case 'm':
		return fTag
	}
	return -1
}

// Decode decodes a context value: a tailor-context header or metadata entry,
// or an already percent-decoded baggage value. Strict and total: s either
// decodes to exactly the context whose encoding it is, or is rejected with
// the *Error of the first rule it breaks (docs/wire-format.md, "Decoding").
func Decode(s string) (Decoded, error) {
	if len(s) > MaxLen {
		return Decoded{}, ErrTooLong
	}
	if s == "" {
		return Decoded{}, ErrMalformed
	}
	for i := 0; i < len(s); i++ {
		if !isValueByte(s[i]) {
			return Decoded{}, ErrInvalidChar
		}
	}
	version, fields, hasFields := strings.Cut(s, ".")
	if !isCanonicalDecimal(version) {
		return Decoded{}, ErrMalformed
	}
	if version != "1" {
		return Decoded{}, ErrUnsupportedVersion
	}
	if !hasFields {
		return Decoded{}, ErrMissingField
	}
	d := Decoded{Context: Context{Deadline: Never}}
	var seen uint
	var hasKeyID, hasTag bool
	// strings.Cut rather than strings.Split: the same parts, without allocating a slice per request.
	for rest, more := fields, true; more; {
		var field string
		field, rest, more = strings.Cut(rest, ".")
		if field == "" {
			return Decoded{}, ErrMalformed
		}
		f := fieldOf(field[0])
		if f < 0 {
			return Decoded{}, ErrUnknownField
		}
		if seen&(1<<f) != 0 {
			return Decoded{}, ErrDuplicateField
		}
		if seen>>f != 0 {
			return Decoded{}, ErrOutOfOrder
		}
		seen |= 1 << f
		value := field[1:]
		var err error
		switch f {
		case fGAT:
			d.Context.GAT, err = number(value, math.MaxUint64)
		case fDeadline:
			// Never is written by omission, so it cannot also be written out.
			d.Context.Deadline, err = number(value, Never-1)
		case fClass:
			var n uint64
			n, err = number(value, math.MaxUint8)
			d.Context.Class = uint8(n)
		case fFanout:
			var n uint64
			n, err = number(value, math.MaxUint32)
			d.Context.Fanout = uint32(n)
		case fHop:
			var n uint64
			n, err = number(value, math.MaxUint8)
			d.Context.Hop = uint8(n)
		case fKeyID:
			if !validKeyID(value) {
				return Decoded{}, ErrMalformed
			}
			d.KeyID, hasKeyID = value, true
		case fTag:
			tag, ok := tagFromBase64URL(value)
			if !ok {
				return Decoded{}, ErrMalformed
			}
			d.Tag, hasTag = tag, true
		}
		if err != nil {
			return Decoded{}, err
		}
	}
	if seen&required != required || hasKeyID != hasTag {
		return Decoded{}, ErrMissingField
	}
	d.Signed = hasKeyID
	return d, nil
}

// isCanonicalDecimal: "0", or a non-zero digit followed by digits.
func isCanonicalDecimal(s string) bool {
	if s == "" || (s[0] == '0' && len(s) > 1) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// number parses a canonical decimal no greater than max; syntax before range.
func number(s string, max uint64) (uint64, error) {
	if !isCanonicalDecimal(s) {
		return 0, ErrInvalidNumber
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > max {
		return 0, ErrOutOfRange
	}
	return n, nil
}
