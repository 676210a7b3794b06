// h3load: the HTTP/3 load generator that cross-checks oha in
// scripts/h3-bench.sh (issue 34 asks for a second one). It is built on
// quic-go, the QUIC stack of Caddy and of most Go services, so it shares
// no code with oha (quinn + h3) or with Switchyard (quinn + h3 too, on
// the server side).
//
//	h3load -url https://HOST:PORT/PATH -connect 127.0.0.1:PORT
//	       -mode ka -c 20 -m 10 -d 8s [-proto h2]  C connections x M streams
//	       -mode new -n 1000 -m 10           N connections, one GET each,
//	                                         M at a time: full handshakes
//	       -mode resume | -mode 0rtt         the same with a session ticket
//	                                         (and the GET in 0-RTT)
//	       -mode rate -rate 5000 -c 20 -m 10 -d 10s -warmup 2s [-proto h2]
//	                                         a fixed rate (rate.go)
//	       [-groups hybrid]                  offer X25519MLKEM768 too (curves)
//
// Prints one JSON object: ok (2xx responses), errors, seconds, rps,
// resumed and early (connections the server resumed / took 0-RTT on);
// -mode rate adds latency percentiles.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

type result struct {
	OK      int64   `json:"ok"`
	Errors  int64   `json:"errors"`
	Seconds float64 `json:"seconds"`
	RPS     float64 `json:"rps"`
	Resumed int64   `json:"resumed"`
	Early   int64   `json:"early"`
}

func main() {
	url := flag.String("url", "", "https URL (its host is the SNI)")
	connect := flag.String("connect", "", "UDP address to send to instead of the URL's")
	mode := flag.String("mode", "ka", "ka | new | resume | 0rtt")
	conns := flag.Int("c", 20, "connections (ka)")
	streams := flag.Int("m", 10, "requests in flight per connection (ka), or connections at once (new, resume, 0rtt)")
	dur := flag.Duration("d", 8*time.Second, "duration (ka)")
	count := flag.Int("n", 1000, "connections (new, resume, 0rtt)")
	rate := flag.Float64("rate", 5000, "requests per second (rate)")
	warmup := flag.Duration("warmup", 2*time.Second, "time at the rate before latencies count (rate)")
	proto := flag.String("proto", "h3", "h3 | h2 (ka, rate): the protocol of the connections")
	groups := flag.String("groups", "x25519", "x25519 | hybrid: the key shares a ClientHello offers")
	flag.Parse()
	switch *groups {
	case "x25519":
		curves = []tls.CurveID{tls.X25519}
	case "hybrid":
		curves = []tls.CurveID{tls.X25519MLKEM768, tls.X25519}
	default:
		fmt.Fprintln(os.Stderr, "h3load: -groups is x25519 or hybrid")
		os.Exit(2)
	}
	if *url == "" {
		fmt.Fprintln(os.Stderr, "h3load: -url is required")
		os.Exit(2)
	}
	var r result
	start := time.Now()
	switch *mode {
	case "ka":
		if *proto != "h3" && *proto != "h2" {
			fmt.Fprintln(os.Stderr, "h3load: -proto is h3 or h2")
			os.Exit(2)
		}
		keepAlive(*url, *connect, *proto, *conns, *streams, *dur, &r)
	case "new", "resume", "0rtt":
		newConnections(*url, *connect, *mode, *count, *streams, &r)
	case "rate":
		if *proto != "h3" && *proto != "h2" {
			fmt.Fprintln(os.Stderr, "h3load: -proto is h3 or h2")
			os.Exit(2)
		}
		out := fixedRate(*url, *connect, *proto, *conns, *streams, *rate, *warmup, *dur)
		_ = json.NewEncoder(os.Stdout).Encode(out)
		return
	default:
		fmt.Fprintln(os.Stderr, "h3load: -mode is ka, new, resume, 0rtt or rate")
		os.Exit(2)
	}
	r.Seconds = time.Since(start).Seconds()
	r.RPS = float64(r.OK) / r.Seconds
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

// curves: the key exchange every connection offers (-groups). X25519 by
// default, as the harness's other loads (Fortio with GODEBUG=tlsmlkem=0,
// h2load on OpenSSL 3.0): Go's own default adds an X25519MLKEM768 share,
// which makes an HTTP/3 ClientHello two Initial packets, and each server
// handles that its own way (0-RTT CPU per connection with it and without,
// 2026-12-07: Switchyard 510 and 460 µs, Envoy 715 and 510), so the
// new-connection rows compared different work. -groups hybrid offers
// what browsers and Go offer by default.
var curves []tls.CurveID

// transport: one QUIC connection per transport (http3.Transport keeps one
// per authority), dialled to `connect` when set.
func transport(connect string, cache tls.ClientSessionCache, early bool, r *result) *http3.Transport {
	return &http3.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ClientSessionCache: cache, CurvePreferences: curves},
		// Compression off: the bench measures the proxy, not gzip.
		DisableCompression: true,
		Dial: func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			if connect != "" {
				addr = connect
			}
			var c *quic.Conn
			var err error
			if early {
				c, err = quic.DialAddrEarly(ctx, addr, tc, qc)
			} else {
				c, err = quic.DialAddr(ctx, addr, tc, qc)
			}
			if err == nil {
				go func() {
					// The handshake's outcome, once it is over.
					select {
					case <-c.HandshakeComplete():
						st := c.ConnectionState()
						if st.TLS.DidResume {
							atomic.AddInt64(&r.Resumed, 1)
						}
						if st.Used0RTT {
							atomic.AddInt64(&r.Early, 1)
						}
					case <-c.Context().Done():
					}
				}()
			}
			return c, err
		},
	}
}

// requestTimeout bounds each request, so that a connection that stalls
// is an error in the report, not a run that never ends.
const requestTimeout = 5 * time.Second

// roundTrip runs one request to its end (the body read); an error for a
// failed exchange or a status other than 2xx. Every mode's requests go
// through it.
func roundTrip(rt http.RoundTripper, url, method string) error {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func get(t http.RoundTripper, url, method string, r *result) {
	began := time.Now()
	err := roundTrip(t, url, method)
	if os.Getenv("H3LOAD_VERBOSE") != "" {
		if err != nil {
			fmt.Fprintln(os.Stderr, "h3load:", err)
		}
		if time.Since(began) > time.Second {
			fmt.Fprintln(os.Stderr, "h3load: slow request:", time.Since(began))
		}
	}
	if err != nil {
		atomic.AddInt64(&r.Errors, 1)
		return
	}
	atomic.AddInt64(&r.OK, 1)
}

// keepAlive: conns connections, each with streams requests in flight,
// over HTTP/3 or (proto "h2", Go's HTTP/2 client) HTTP/2, so that the two
// protocols can be compared by one client's code and pace.
func keepAlive(url, connect, proto string, conns, streams int, dur time.Duration, r *result) {
	deadline := time.Now().Add(dur)
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		var t http.RoundTripper
		if proto == "h2" {
			h2 := h2Transport(connect)
			defer h2.CloseIdleConnections()
			t = h2
		} else {
			h3 := transport(connect, nil, false, r)
			defer h3.Close()
			t = h3
		}
		for j := 0; j < streams; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					get(t, url, http.MethodGet, r)
				}
			}()
		}
	}
	wg.Wait()
}

// onceCache hands out each session ticket once, newest first, as
// browsers use TLS 1.3 tickets (RFC 8446 C.4). Go's own LRU cache keeps
// one ticket per server and gives it to every connection: against a
// server whose tickets are single-use (Switchyard's 0-RTT anti-replay)
// all but one of the connections that share it would make a full
// handshake, and the bench would measure the cache, not the server.
type onceCache struct {
	mu      sync.Mutex
	tickets map[string][]*tls.ClientSessionState
}

func (c *onceCache) Get(key string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.tickets[key]
	if len(q) == 0 {
		return nil, false
	}
	s := q[len(q)-1]
	c.tickets[key] = q[:len(q)-1]
	return s, true
}

func (c *onceCache) Put(key string, s *tls.ClientSessionState) {
	if s == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	q := append(c.tickets[key], s)
	// Bounded: the oldest go first.
	if len(q) > 4096 {
		q = q[len(q)-4096:]
	}
	c.tickets[key] = q
}

func newConnections(url, connect, mode string, count, parallel int, r *result) {
	// One cache: every connection resumes with a ticket an earlier one got,
	// each ticket once (onceCache).
	var cache tls.ClientSessionCache
	if mode != "new" {
		cache = &onceCache{tickets: map[string][]*tls.ClientSessionState{}}
		// Tickets to start from, not counted.
		var warm result
		for i := 0; i < parallel; i++ {
			t := transport(connect, cache, false, &warm)
			get(t, url, http.MethodGet, &warm)
			t.Close()
		}
	}
	method := http.MethodGet
	if mode == "0rtt" {
		method = http3.MethodGet0RTT
	}
	jobs := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < parallel; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				t := transport(connect, cache, mode == "0rtt", r)
				get(t, url, method, r)
				t.Close()
			}
		}()
	}
	for i := 0; i < count; i++ {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
}
