package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// TotalRAM is the machine's memory in bytes, from MemTotal in /proc/meminfo,
// or 0 when it cannot be read (not Linux, no /proc, an unexpected line): the
// caller falls back, and MountDefault(0) takes the smallest budget.
func TotalRAM() uint64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	n, err := parseMemTotal(data)
	if err != nil {
		return 0
	}
	return n
}

var errNoMemTotal = errors.New("no MemTotal line")

// parseMemTotal reads the MemTotal line of /proc/meminfo, "MemTotal: 16384 kB",
// and returns bytes.
func parseMemTotal(data []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("meminfo: bad MemTotal line %q", sc.Text())
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || kb > (1<<64-1)/1024 {
			return 0, fmt.Errorf("meminfo: bad MemTotal line %q", sc.Text())
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("meminfo: %w", err)
	}
	return 0, fmt.Errorf("meminfo: %w", errNoMemTotal)
}
