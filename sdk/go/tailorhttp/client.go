package tailorhttp

import (
	"net/http"

	"github.com/tailor-sched/tailor/sdk/go/tailorctx"
)

// Transport is an http.RoundTripper for outgoing calls: a request whose
// context.Context carries a Tailor context (the request being served, from
// the middleware) goes out with its child (same GAT, deadline and class, one
// hop further) in tailor-context and in the tailor member of baggage,
// replacing any already there. Other requests go out untouched.
type Transport struct {
	// Base makes the call; nil means http.DefaultTransport.
	Base http.RoundTripper
}

// RoundTrip implements http.RoundTripper. The caller's request is not
// modified (a clone with the new headers goes out).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	parent, ok := tailorctx.FromContext(req.Context())
	if !ok {
		return base.RoundTrip(req)
	}
	out := req.Clone(req.Context())
	WriteHeaders(out.Header, parent.Child())
	return base.RoundTrip(out)
}

// Client is an http.Client that forwards the context of the request being served.
func Client() *http.Client {
	return &http.Client{Transport: &Transport{}}
}
