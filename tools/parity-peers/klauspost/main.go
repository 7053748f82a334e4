// Command klauspost measures github.com/klauspost/reedsolomon on the shapes of
// `cairn bench parity` (single goroutine, cache-hot, GB/s of data, median of reps).
//
// klauspost's coding matrix is not RAID-Z's (P/Q/R), so this is a speed comparison only:
// the bytes it computes differ from cairn's. Run: go run . [-reps 7] [-json out.json]
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"time"

	"github.com/klauspost/reedsolomon"
)

type result struct {
	Op       string  `json:"op"`
	NData    int     `json:"ndata"`
	NParity  int     `json:"nparity"`
	ColBytes int     `json:"col_bytes"`
	GBps     float64 `json:"gbps"`
}

type op struct {
	name    string
	nparity int
	rebuild int // data shards rebuilt (0: encode)
}

var ops = []op{
	{"gen P", 1, 0}, {"gen PQ", 2, 0}, {"gen PQR", 3, 0},
	{"rebuild 1 data", 3, 1}, {"rebuild 2 data", 3, 2}, {"rebuild 3 data", 3, 3},
}

// medianSecsPerCall calibrates a repetition of at least minRep and returns the median
// seconds per call over reps repetitions.
func medianSecsPerCall(reps int, minRep time.Duration, call func()) float64 {
	call()
	iters := 1
	for {
		start := time.Now()
		for i := 0; i < iters; i++ {
			call()
		}
		if el := time.Since(start); el >= minRep/4 {
			perCall := el.Seconds() / float64(iters)
			iters = int(minRep.Seconds()/perCall) + 1
			break
		}
		iters *= 2
	}
	samples := make([]float64, reps)
	for r := range samples {
		start := time.Now()
		for i := 0; i < iters; i++ {
			call()
		}
		samples[r] = time.Since(start).Seconds() / float64(iters)
	}
	sort.Float64s(samples)
	return samples[len(samples)/2]
}

func measure(o op, ndata, colBytes, reps int) (float64, error) {
	enc, err := reedsolomon.New(ndata, o.nparity, reedsolomon.WithMaxGoroutines(1))
	if err != nil {
		return 0, err
	}
	shards := make([][]byte, ndata+o.nparity)
	for i := range shards {
		shards[i] = make([]byte, colBytes)
		if i < ndata {
			rand.Read(shards[i])
		}
	}
	if err := enc.Encode(shards); err != nil {
		return 0, err
	}
	var call func()
	if o.rebuild == 0 {
		call = func() {
			if err := enc.Encode(shards); err != nil {
				panic(err)
			}
		}
	} else {
		saved := make([][]byte, o.rebuild)
		copy(saved, shards[:o.rebuild])
		call = func() {
			// Zero length with capacity: ReconstructData rebuilds into the same memory.
			for i := 0; i < o.rebuild; i++ {
				shards[i] = saved[i][:0]
			}
			if err := enc.ReconstructData(shards); err != nil {
				panic(err)
			}
		}
	}
	secs := medianSecsPerCall(reps, 20*time.Millisecond, call)
	return float64(ndata*colBytes) / secs / 1e9, nil
}

func main() {
	reps := flag.Int("reps", 7, "timed repetitions per figure (median reported)")
	jsonOut := flag.String("json", "", "also write results as JSON to this file")
	flag.Parse()

	fmt.Println("klauspost/reedsolomon, 1 goroutine, cache-hot, GB/s of data (median of reps)")
	fmt.Printf("%-11s %-15s %8s\n", "shape", "op", "GB/s")
	var results []result
	for _, ndata := range []int{4, 8, 10, 20} {
		for _, colBytes := range []int{4 << 10, 128 << 10, 1 << 20} {
			for _, o := range ops {
				gbps, err := measure(o, ndata, colBytes, *reps)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				shape := fmt.Sprintf("%d+%d %dK", ndata, o.nparity, colBytes>>10)
				fmt.Printf("%-11s %-15s %8.1f\n", shape, o.name, gbps)
				results = append(results, result{o.name, ndata, o.nparity, colBytes, gbps})
			}
		}
	}
	if *jsonOut != "" {
		data, _ := json.MarshalIndent(results, "", "  ")
		if err := os.WriteFile(*jsonOut, append(data, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
