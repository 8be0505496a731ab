package tailorctx

// The shared wire-format vectors (testdata/context/vectors.json): this codec
// must pass every case, exactly as the Rust and Python codecs must. Each case
// is a subtest named after it.

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var vectorsPath = filepath.Join("..", "..", "..", "testdata", "context", "vectors.json")

type jsonContext struct {
	GAT      string  `json:"gat"`
	Deadline *string `json:"deadline"`
	Class    uint8   `json:"class"`
	Fanout   uint32  `json:"fanout"`
	Hop      uint8   `json:"hop"`
}

func (j jsonContext) ctx(t *testing.T) Context {
	c := Context{GAT: ns(t, j.GAT), Deadline: Never, Class: j.Class, Fanout: j.Fanout, Hop: j.Hop}
	if j.Deadline != nil {
		c.Deadline = ns(t, *j.Deadline)
	}
	return c
}

// input is a string, {"hex"} or {"prefix","repeat","times","suffix"}.
type input string

func (in *input) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*in = input(s)
		return nil
	}
	var o struct {
		Hex                    *string
		Prefix, Repeat, Suffix string
		Times                  int
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	if o.Hex != nil {
		raw, err := hex.DecodeString(*o.Hex)
		*in = input(raw)
		return err
	}
	*in = input(o.Prefix + strings.Repeat(o.Repeat, o.Times) + o.Suffix)
	return nil
}

type outcome struct {
	Context *jsonContext `json:"context"`
	Error   *string      `json:"error"`
	Absent  bool         `json:"absent"`
}

type key struct {
	ID        string `json:"id"`
	SecretHex string `json:"secret_hex"`
}

type vectorFile struct {
	Version    int            `json:"version"`
	Limits     map[string]int `json:"limits"`
	ErrorKinds []string       `json:"error_kinds"`
	Keys       []key          `json:"keys"`
	Valid      []struct {
		Name    string
		Context jsonContext
		Value   string
	}
	Invalid []struct {
		Name  string
		Input input
		outcome
	}
	Signed []struct {
		Name    string
		Key     string
		Context jsonContext
		Value   string
	}
	Verify []struct {
		Name  string
		Keys  []string
		Input input
		outcome
	}
	KeysInvalid []struct {
		Name      string
		ID        string
		SecretHex string `json:"secret_hex"`
		Error     string
	} `json:"keys_invalid"`
	BaggageDecode []struct {
		Name   string
		Header input
		outcome
	} `json:"baggage_decode"`
	BaggageWith []struct {
		Name   string
		Header *string
		Value  string
		Want   string
	} `json:"baggage_with"`
	BaggageWithout []struct {
		Name   string
		Header string
		Want   *string
	} `json:"baggage_without"`
	Extract []struct {
		Name    string
		Headers [][2]input
		outcome
	}
	GrpcTimeoutEncode []struct {
		Remaining string
		Value     string
	} `json:"grpc_timeout_encode"`
	GrpcTimeoutDecode []struct {
		Value string
		Ns    *string
		Error *string
	} `json:"grpc_timeout_decode"`
	GrpcTimeoutFromDeadline []struct {
		Name     string
		Deadline *string
		Now      string
		Value    *string
	} `json:"grpc_timeout_from_deadline"`
	GrpcTimeoutToDeadline []struct {
		Name     string
		Value    string
		Now      string
		Deadline *string
		Error    *string
	} `json:"grpc_timeout_to_deadline"`
	Clamp []struct {
		Name    string
		Context jsonContext
		Now     string
		MaxAge  string `json:"max_age"`
		Want    jsonContext
		Clamped struct {
			GATAhead      string `json:"gat_ahead"`
			GATStale      string `json:"gat_stale"`
			DeadlineEarly string `json:"deadline_early"`
		}
	}
	Edge []struct {
		Name  string
		Route struct {
			Class  uint8
			Budget *string
		}
		Now  string
		Want jsonContext
	}
}

func load(t *testing.T) *vectorFile {
	t.Helper()
	b, err := os.ReadFile(vectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	var v vectorFile
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", vectorsPath, err)
	}
	return &v
}

func ns(t *testing.T, s string) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("ns value %q: %v", s, err)
	}
	return n
}

func nsOrNever(t *testing.T, s *string) uint64 {
	if s == nil {
		return Never
	}
	return ns(t, *s)
}

func kindOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind()
	}
	return "not a *Error: " + err.Error()
}

// check compares (context, found, err) with a case's context / error / absent.
func (o outcome) check(t *testing.T, got Context, found bool, err error) {
	t.Helper()
	switch {
	case o.Error != nil:
		if err == nil || kindOf(err) != *o.Error {
			t.Errorf("got %+v, %v; want error %s", got, err, *o.Error)
		}
	case o.Absent:
		if err != nil || found {
			t.Errorf("got %+v found=%v err=%v; want absent", got, found, err)
		}
	default:
		if want := o.Context.ctx(t); err != nil || !found || got != want {
			t.Errorf("got %+v found=%v err=%v; want %+v", got, found, err, want)
		}
	}
}

func mustKey(t *testing.T, v *vectorFile, id string) *Key {
	t.Helper()
	for _, k := range v.Keys {
		if k.ID == id {
			secret, _ := hex.DecodeString(k.SecretHex)
			key, err := NewKey(id, secret)
			if err != nil {
				t.Fatal(err)
			}
			return key
		}
	}
	t.Fatalf("no key %s", id)
	return nil
}

func TestErrorKindsAreTheSharedList(t *testing.T) {
	v := load(t)
	var have []string
	for _, e := range ErrorKinds {
		have = append(have, e.Kind())
	}
	if strings.Join(have, ",") != strings.Join(v.ErrorKinds, ",") {
		t.Errorf("kinds\n have %v\n want %v", have, v.ErrorKinds)
	}
	if v.Version != Version || v.Limits["max_len"] != MaxLen || v.Limits["max_baggage_len"] != MaxBaggageLen ||
		v.Limits["max_key_id_len"] != MaxKeyIDLen || v.Limits["min_secret_len"] != MinSecretLen {
		t.Errorf("limits differ: %v", v.Limits)
	}
}

func TestValid(t *testing.T) {
	for _, c := range load(t).Valid {
		t.Run(c.Name, func(t *testing.T) {
			ctx := c.Context.ctx(t)
			if got := Encode(ctx); got != c.Value {
				t.Errorf("Encode = %q, want %q", got, c.Value)
			}
			d, err := Decode(c.Value)
			if err != nil || d.Context != ctx || d.Signed {
				t.Errorf("Decode = %+v, %v", d, err)
			}
		})
	}
}

func TestInvalid(t *testing.T) {
	for _, c := range load(t).Invalid {
		t.Run(c.Name, func(t *testing.T) {
			d, err := Decode(string(c.Input))
			c.check(t, d.Context, err == nil, err)
		})
	}
}

func TestSigned(t *testing.T) {
	v := load(t)
	for _, c := range v.Signed {
		t.Run(c.Name, func(t *testing.T) {
			k := mustKey(t, v, c.Key)
			ctx := c.Context.ctx(t)
			if got := EncodeSigned(ctx, k); got != c.Value {
				t.Errorf("EncodeSigned = %q, want %q", got, c.Value)
			}
			d, err := Decode(c.Value)
			if err != nil {
				t.Fatal(err)
			}
			ring, _ := NewKeyring(k)
			if got, err := d.Verify(ring); err != nil || got != ctx || d.Encode() != c.Value {
				t.Errorf("Verify = %+v, %v; re-encoded %q", got, err, d.Encode())
			}
		})
	}
}

func TestVerify(t *testing.T) {
	v := load(t)
	for _, c := range v.Verify {
		t.Run(c.Name, func(t *testing.T) {
			var keys []*Key
			for _, id := range c.Keys {
				keys = append(keys, mustKey(t, v, id))
			}
			ring, err := NewKeyring(keys...)
			if err != nil {
				t.Fatal(err)
			}
			d, err := Decode(string(c.Input))
			var got Context
			if err == nil {
				got, err = d.Verify(ring)
			}
			c.check(t, got, err == nil, err)
		})
	}
}

func TestKeysInvalid(t *testing.T) {
	for _, c := range load(t).KeysInvalid {
		t.Run(c.Name, func(t *testing.T) {
			secret, _ := hex.DecodeString(c.SecretHex)
			_, err := NewKey(c.ID, secret)
			var e *KeyError
			if !errors.As(err, &e) || e.Kind() != c.Error {
				t.Errorf("NewKey error = %v, want %s", err, c.Error)
			}
		})
	}
}

func TestBaggageDecode(t *testing.T) {
	for _, c := range load(t).BaggageDecode {
		t.Run(c.Name, func(t *testing.T) {
			d, found, err := DecodeBaggage(string(c.Header))
			c.check(t, d.Context, found, err)
		})
	}
}

func TestBaggageWith(t *testing.T) {
	for _, c := range load(t).BaggageWith {
		t.Run(c.Name, func(t *testing.T) {
			header := ""
			if c.Header != nil {
				header = *c.Header
			}
			if got := BaggageWith(header, c.Value); got != c.Want {
				t.Errorf("got %q, want %q", got, c.Want)
			}
		})
	}
}

func TestBaggageWithout(t *testing.T) {
	for _, c := range load(t).BaggageWithout {
		t.Run(c.Name, func(t *testing.T) {
			want := ""
			if c.Want != nil {
				want = *c.Want
			}
			if got := BaggageWithout(c.Header); got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
}

func TestExtract(t *testing.T) {
	for _, c := range load(t).Extract {
		t.Run(c.Name, func(t *testing.T) {
			// As http.Header.Values: every value of a name, case-insensitively, in order.
			values := func(name string) []string {
				var out []string
				for _, h := range c.Headers {
					if strings.EqualFold(string(h[0]), name) {
						out = append(out, string(h[1]))
					}
				}
				return out
			}
			d, found, err := Extract(values)
			c.check(t, d.Context, found, err)
		})
	}
}

func TestGrpcTimeout(t *testing.T) {
	v := load(t)
	for _, c := range v.GrpcTimeoutEncode {
		if got := GrpcTimeoutEncode(ns(t, c.Remaining)); got != c.Value {
			t.Errorf("encode %s = %q, want %q", c.Remaining, got, c.Value)
		}
	}
	for _, c := range v.GrpcTimeoutDecode {
		got, err := GrpcTimeoutDecode(c.Value)
		if c.Error != nil {
			if err == nil || kindOf(err) != *c.Error {
				t.Errorf("decode %q = %d, %v; want %s", c.Value, got, err, *c.Error)
			}
		} else if err != nil || got != ns(t, *c.Ns) {
			t.Errorf("decode %q = %d, %v; want %s", c.Value, got, err, *c.Ns)
		}
	}
	for _, c := range v.GrpcTimeoutFromDeadline {
		got, ok := GrpcTimeoutFromDeadline(nsOrNever(t, c.Deadline), ns(t, c.Now))
		if ok != (c.Value != nil) || (ok && got != *c.Value) {
			t.Errorf("%s: got %q %v, want %v", c.Name, got, ok, c.Value)
		}
	}
	for _, c := range v.GrpcTimeoutToDeadline {
		got, err := GrpcTimeoutToDeadline(c.Value, ns(t, c.Now))
		if c.Error != nil {
			if err == nil || kindOf(err) != *c.Error {
				t.Errorf("%s: got %d, %v; want %s", c.Name, got, err, *c.Error)
			}
		} else if err != nil || got != nsOrNever(t, c.Deadline) {
			t.Errorf("%s: got %d, %v", c.Name, got, err)
		}
	}
}

func TestClamp(t *testing.T) {
	for _, c := range load(t).Clamp {
		t.Run(c.Name, func(t *testing.T) {
			got, clamped := Clamp(c.Context.ctx(t), ns(t, c.Now), ns(t, c.MaxAge))
			want := Clamped{ns(t, c.Clamped.GATAhead), ns(t, c.Clamped.GATStale), ns(t, c.Clamped.DeadlineEarly)}
			if got != c.Want.ctx(t) || clamped != want {
				t.Errorf("got %+v %+v, want %+v %+v", got, clamped, c.Want.ctx(t), want)
			}
		})
	}
}

func TestEdge(t *testing.T) {
	for _, c := range load(t).Edge {
		t.Run(c.Name, func(t *testing.T) {
			r := EdgeRoute{Class: c.Route.Class, HasBudget: c.Route.Budget != nil}
			if r.HasBudget {
				r.Budget = ns(t, *c.Route.Budget)
			}
			if got := r.Stamp(ns(t, c.Now)); got != c.Want.ctx(t) {
				t.Errorf("got %+v, want %+v", got, c.Want.ctx(t))
			}
		})
	}
}

func TestStats(t *testing.T) {
	var s Stats
	_, found, err := Extract(func(string) []string { return nil })
	s.Record(found, err)
	_, err = Decode("2.x")
	s.Record(true, err)
	s.RecordError(ErrBadMAC)
	s.RecordClamp(Clamped{GATStale: 5})
	if s.Absent() != 1 || s.Accepted() != 0 {
		t.Errorf("absent %d accepted %d", s.Absent(), s.Accepted())
	}
	counts := map[string]uint64{}
	for _, kc := range s.Rejected() {
		counts[kc.Kind] = kc.Count
	}
	if len(counts) != len(ErrorKinds) || counts["unsupported_version"] != 1 || counts["bad_mac"] != 1 {
		t.Errorf("rejected %v", s.Rejected())
	}
	if s.Clamps()[1] != (KindCount{"gat_stale", 1}) {
		t.Errorf("clamps %v", s.Clamps())
	}
}
