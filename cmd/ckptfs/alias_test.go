package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/config"
)

// TestStoreOptionAliases: the names s3fs and others give the store options
// set them as ckptfs's own names do; an endpoint host:port is http.
func TestStoreOptionAliases(t *testing.T) {
	for _, tc := range []struct {
		opts []string
		want storeOpts
	}{
		{[]string{"use_path_request_style"}, storeOpts{pathStyle: true}},
		{[]string{"use_path_request_style=false"}, storeOpts{}},
		{[]string{"logfile=/var/log/ckptfs.log"}, storeOpts{logFile: "/var/log/ckptfs.log"}},
		{[]string{"passwd_file=/etc/passwd-s3fs"}, storeOpts{credentialsFile: "/etc/passwd-s3fs"}},
		{[]string{"credentials_file=/etc/ckptfs/keys"}, storeOpts{credentialsFile: "/etc/ckptfs/keys"}},
		{[]string{"use_sse"}, storeOpts{sse: "AES256"}},
		{[]string{"use_sse=1"}, storeOpts{sse: "AES256"}},
		{[]string{"use_sse=0"}, storeOpts{}},
		{[]string{"use_sse=kmsid"}, storeOpts{sse: "aws:kms"}},
		{[]string{"use_sse=k:alias/mine"}, storeOpts{sse: "aws:kms", sseKMSKeyID: "alias/mine"}},
		{[]string{"use_sse=kmsid:arn:aws:kms:eu-west-1:1:key/x"}, storeOpts{sse: "aws:kms", sseKMSKeyID: "arn:aws:kms:eu-west-1:1:key/x"}},
		{[]string{"storage_class=standard"}, storeOpts{storageClass: "STANDARD"}},
		{[]string{"storage_class=Standard_IA"}, storeOpts{storageClass: "STANDARD_IA"}},
		{[]string{"endpoint=127.0.0.1:7070"}, storeOpts{endpoint: "http://127.0.0.1:7070"}},
		{[]string{"endpoint=minio.local:9000"}, storeOpts{endpoint: "http://minio.local:9000"}},
		{[]string{"endpoint=[::1]:9000"}, storeOpts{endpoint: "http://[::1]:9000"}},
		{[]string{"endpoint=https://s3.example.com"}, storeOpts{endpoint: "https://s3.example.com"}},
		{[]string{"endpoint=https://s3.example.com:8443"}, storeOpts{endpoint: "https://s3.example.com:8443"}},
	} {
		so, rest, err := takeStoreOpts(tc.opts)
		if err != nil || len(rest) != 0 || so != tc.want {
			t.Errorf("takeStoreOpts(%q) = %+v, %q, %v; want %+v", tc.opts, so, rest, err, tc.want)
		}
	}
	for _, bad := range []string{"use_sse=custom", "use_sse=c", "use_sse=kmsid:", "use_sse=maybe", "logfile=", "passwd_file=", "credentials_file"} {
		if _, _, err := takeStoreOpts([]string{bad}); err == nil {
			t.Errorf("takeStoreOpts(%q) accepted", bad)
		}
	}
}

// TestAliasesEverywhere: the aliases reach a mount's configuration and
// every tool's, -d/--debug sets log=debug, and the help names them all.
func TestAliasesEverywhere(t *testing.T) {
	store := "file://" + t.TempDir()
	for _, args := range [][]string{
		{"ckptfs", "mount", "-o", "part_size=32M,max_threads=16,logfile=/tmp/l,use_path_request_style", store, "/m"},
		{"ckptfs", "mount", "-d", "-o", "part_size=32M,max_concurrency=16,max_requests=16", store, "/m"},
		{"ckptfs", "mount", "--debug", "-o", "log=info,part_size=32M,max_threads=16,max_concurrency=16", store, "/m"},
	} {
		got, code, _, errOut := runStub(args, 0)
		if code != 0 || got == nil {
			t.Errorf("%q: exit %d: %s", args, code, errOut)
			continue
		}
		so, cfg, err := parseMountOpts(got.opts)
		if err != nil {
			t.Errorf("%q: %v", args, err)
			continue
		}
		wantPerFile := 8
		if strings.Contains(strings.Join(args, " "), "max_concurrency=16") {
			wantPerFile = 16
		}
		if cfg.SegmentMPUChunkSize != 32<<20 || cfg.MaxRequests != 16 || cfg.SegmentMPUMaxConcurrency != wantPerFile {
			t.Errorf("%q: %s", args, cfg.EncodeChanged(config.MountDefault(0)))
		}
		debug := slices.Contains(args, "-d") || slices.Contains(args, "--debug")
		if debug != (cfg.Log == config.LogDebug) {
			t.Errorf("%q: log=%s", args, cfg.Log)
		}
		if !debug && (so.logFile != "/tmp/l" || !so.pathStyle) {
			t.Errorf("%q: store options %+v", args, so)
		}
	}
	// A tool takes the store options' aliases, and refuses the mount's.
	if _, _, err := parseToolOpts([]string{"use_path_request_style", "storage_class=standard"}); err != nil {
		t.Errorf("a tool refused the aliases of store options: %v", err)
	}
	if _, _, err := parseToolOpts([]string{"part_size=32M"}); err == nil || !strings.Contains(err.Error(), "mount only") {
		t.Errorf("a tool took part_size: %v", err)
	}
	_, _, out, _ := runStub([]string{"ckptfs", "mount", "--help"}, 0)
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"also part_size", "also max_concurrency", "also max_threads", "use_path_request_style",
		"use_sse", "logfile", "any case", "host:port is http://host:port", "-d, --debug"} {
		if !strings.Contains(flat, want) {
			t.Errorf("mount --help lacks %q", want)
		}
	}
}
