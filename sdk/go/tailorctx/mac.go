package tailorctx

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
)

const (
	// TagLen is the bytes in a tag: the first 128 bits of the HMAC-SHA256.
	TagLen = 16
	// TagChars is the characters in a tag's unpadded base64url form.
	TagChars = 22
	// MaxKeyIDLen is the longest key id.
	MaxKeyIDLen = 16
	// MinSecretLen is the shortest secret accepted.
	MinSecretLen = 16
)

// Key is a shared secret and its id, for hops that cross a trust boundary.
type Key struct {
	id     string
	secret []byte
}

// NewKey makes a key named id (1-16 of A-Z a-z 0-9 - _) with secret (at
// least 16 bytes; use 32 random bytes). Errors are *KeyError.
func NewKey(id string, secret []byte) (*Key, error) {
	if !validKeyID(id) {
		return nil, ErrInvalidKeyID
	}
	if len(secret) < MinSecretLen {
		return nil, ErrShortSecret
	}
	return &Key{id: id, secret: append([]byte(nil), secret...)}, nil
}

// ID is the key's id.
func (k *Key) ID() string { return k.id }

func (k *Key) tag(msg string) [TagLen]byte {
	h := hmac.New(sha256.New, k.secret)
	h.Write([]byte(msg))
	var t [TagLen]byte
	copy(t[:], h.Sum(nil))
	return t
}

// Keyring is the keys a hop accepts tags from, by id.
type Keyring struct{ keys []*Key }

// NewKeyring makes a keyring; ids must be unique.
func NewKeyring(keys ...*Key) (*Keyring, error) {
	r := &Keyring{}
	for _, k := range keys {
		if r.Get(k.id) != nil {
			return nil, ErrDuplicateKeyID
		}
		r.keys = append(r.keys, k)
	}
	return r, nil
}

// Get is the key named id, or nil.
func (r *Keyring) Get(id string) *Key {
	for _, k := range r.keys {
		if k.id == id {
			return k
		}
	}
	return nil
}

func validKeyID(s string) bool {
	if s == "" || len(s) > MaxKeyIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isBase64URL(s[i]) {
			return false
		}
	}
	return true
}

func isBase64URL(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_'
}

// tagFromBase64URL accepts exactly 22 base64url characters whose last one
// carries zero padding bits (one of A Q g w): one string per tag.
func tagFromBase64URL(s string) ([TagLen]byte, bool) {
	var t [TagLen]byte
	if len(s) != TagChars {
		return t, false
	}
	for i := 0; i < len(s); i++ {
		if !isBase64URL(s[i]) {
			return t, false
		}
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != TagLen {
		return t, false
	}
	copy(t[:], b)
	return t, true
}

func signedPrefix(c Context, keyID string) string {
	var b [MaxLen]byte
	return string(append(append(appendContext(b[:0], c), ".i"...), keyID...))
}

func withTag(prefix string, t [TagLen]byte) string {
	return prefix + ".m" + base64.RawURLEncoding.EncodeToString(t[:])
}

// EncodeSigned is the canonical encoding of c signed with k: the unsigned
// encoding, ".i<key id>", then ".m<tag>", the tag being HMAC-SHA256 under k of
// every byte before ".m", truncated to 128 bits, in unpadded base64url.
func EncodeSigned(c Context, k *Key) string {
	prefix := signedPrefix(c, k.id)
	return withTag(prefix, k.tag(prefix))
}

// Verify returns the context if it is signed by a key in ring and the tag
// matches (compared in constant time). Errors: ErrMissingMAC, ErrUnknownKey, ErrBadMAC.
func (d Decoded) Verify(ring *Keyring) (Context, error) {
	if !d.Signed {
		return Context{}, ErrMissingMAC
	}
	k := ring.Get(d.KeyID)
	if k == nil {
		return Context{}, ErrUnknownKey
	}
	want := k.tag(signedPrefix(d.Context, d.KeyID))
	if !hmac.Equal(want[:], d.Tag[:]) {
		return Context{}, ErrBadMAC
	}
	return d.Context, nil
}
