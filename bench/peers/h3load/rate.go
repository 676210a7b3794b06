package main

// -mode rate: P99 at a fixed rate, HTTP/3 against HTTP/2 with one client.
//
// Why a mode of our own: oha's -q with --latency-correction counts the
// requests that fall due while its connections are still being set up,
// and at 5,000 requests/s for 10 s the slowest 1 % is the first 100 ms'
// worth of requests; so its P99 weighs the handshakes as much as the
// server. Here the connections are set up first, the rate runs for
// -warmup before anything counts, and both protocols go through the same
// scheduler in the same Go process: the HTTP/2 connections through
// golang.org/x/net/http2 (each connection its own transport, as each
// HTTP/3 connection is), the HTTP/3 ones through quic-go.
//
// Requests fall due on one clock, 1/rate apart. C x M workers (M per
// connection) take them in order; a due request waits while every worker
// is busy, and its latency counts from when it was due (no coordinated
// omission). "service" counts from when a worker sent it: the two differ
// only when the client or the server fell behind.

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

type rateResult struct {
	// Every 2xx, the warm-up's too (for CPU per request).
	AllOK     int64   `json:"all_ok"`
	OK        int64   `json:"ok"`
	Errors    int64   `json:"errors"`
	Late      int64   `json:"late"`
	RPS       float64 `json:"rps"`
	P50us     float64 `json:"p50_us"`
	P90us     float64 `json:"p90_us"`
	P99us     float64 `json:"p99_us"`
	P999us    float64 `json:"p999_us"`
	MaxUs     float64 `json:"max_us"`
	SvcP50us  float64 `json:"service_p50_us"`
	SvcP99us  float64 `json:"service_p99_us"`
	Counted   int     `json:"counted"`
	Protocol  string  `json:"protocol"`
	RateAsked float64 `json:"rate"`
}

// One request's times, from when it fell due.
type sample struct {
	total, service time.Duration
	ok             bool
}

func h2Transport(connect string) *http2.Transport {
	return &http2.Transport{
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}, CurvePreferences: curves},
		DisableCompression: true,
		DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
			if connect != "" {
				addr = connect
			}
			d := tls.Dialer{Config: cfg}
			return d.DialContext(ctx, "tcp", addr)
		},
	}
}

func fixedRate(url, connect, proto string, conns, streams int, rate float64, warmup, dur time.Duration) rateResult {
	var none result
	rts := make([]http.RoundTripper, conns)
	for i := range rts {
		if proto == "h2" {
			t := h2Transport(connect)
			defer t.CloseIdleConnections()
			rts[i] = t
		} else {
			t := transport(connect, nil, false, &none)
			defer t.Close()
			rts[i] = t
		}
		// The handshake, before the clock starts.
		_ = roundTrip(rts[i], url, http.MethodGet)
	}
	interval := time.Duration(float64(time.Second) / rate)
	total := int((warmup + dur).Seconds() * rate)
	skip := int(warmup.Seconds() * rate)
	samples := make([]sample, total)
	// Room for every due request: the scheduler never waits for a worker.
	due := make(chan int, total)
	var late int64
	start := time.Now().Add(10 * time.Millisecond)
	var wg sync.WaitGroup
	for w := 0; w < conns*streams; w++ {
		wg.Add(1)
		go func(rt http.RoundTripper) {
			defer wg.Done()
			for i := range due {
				sent := time.Now()
				okay := roundTrip(rt, url, http.MethodGet) == nil
				end := time.Now()
				dueAt := start.Add(time.Duration(i) * interval)
				samples[i] = sample{total: end.Sub(dueAt), service: end.Sub(sent), ok: okay}
				if sent.Sub(dueAt) > time.Millisecond {
					atomic.AddInt64(&late, 1)
				}
			}
		}(rts[w%conns])
	}
	for i := 0; i < total; i++ {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		due <- i
	}
	close(due)
	wg.Wait()
	elapsed := time.Since(start.Add(warmup))

	out := rateResult{Protocol: proto, RateAsked: rate, Late: late}
	for _, s := range samples[:skip] {
		if s.ok {
			out.AllOK++
		}
	}
	var totals, services []time.Duration
	for _, s := range samples[skip:] {
		if !s.ok {
			out.Errors++
			continue
		}
		out.OK++
		out.AllOK++
		totals = append(totals, s.total)
		services = append(services, s.service)
	}
	out.Counted = len(totals)
	out.RPS = float64(out.OK) / elapsed.Seconds()
	if len(totals) == 0 {
		return out
	}
	sort.Slice(totals, func(a, b int) bool { return totals[a] < totals[b] })
	sort.Slice(services, func(a, b int) bool { return services[a] < services[b] })
	at := func(d []time.Duration, q float64) float64 {
		return float64(d[int(q*float64(len(d)-1))].Nanoseconds()) / 1e3
	}
	out.P50us, out.P90us, out.P99us, out.P999us = at(totals, 0.5), at(totals, 0.9), at(totals, 0.99), at(totals, 0.999)
	out.MaxUs = at(totals, 1)
	out.SvcP50us, out.SvcP99us = at(services, 0.5), at(services, 0.99)
	return out
}
