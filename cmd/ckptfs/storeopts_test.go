package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckptfs/ckptfs/staging/s3test"
)

func TestTakeStoreOptsS3(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	so, rest, err := takeStoreOpts([]string{"sse=aws:kms", "sse_kms_key_id=alias/k", "storage_class=STANDARD_IA",
		"checksum=crc64nvme", "ca_bundle=ca.pem", "credentials_file=keys", "requester_pays", "rw"})
	if err != nil {
		t.Fatal(err)
	}
	want := storeOpts{sse: "aws:kms", sseKMSKeyID: "alias/k", storageClass: "STANDARD_IA", checksum: "crc64nvme",
		caBundle: filepath.Join(wd, "ca.pem"), credentialsFile: filepath.Join(wd, "keys"), requesterPays: true}
	if so != want {
		t.Errorf("store options %+v, want %+v", so, want)
	}
	if len(rest) != 1 || rest[0] != "rw" {
		t.Errorf("rest %q", rest)
	}
	for _, bad := range []string{"sse", "sse_kms_key_id=", "storage_class=", "checksum", "ca_bundle=", "requester_pays=maybe"} {
		if _, _, err := takeStoreOpts([]string{bad}); err == nil {
			t.Errorf("takeStoreOpts(%q) accepted", bad)
		}
	}
	if so, _, _ := takeStoreOpts([]string{"requester_pays=off"}); so.requesterPays {
		t.Error("requester_pays=off turned it on")
	}
}

// TestOpenStoreS3OptionsRefused: a wrong S3 option fails at start, naming
// the option; one given for a store that is not S3 too.
func TestOpenStoreS3OptionsRefused(t *testing.T) {
	ctx := context.Background()
	s3 := "s3://bucket/vol"
	base := storeOpts{endpoint: "http://127.0.0.1:1", region: "us-east-1", pathStyle: true}
	for _, tc := range []struct {
		spec string
		opts []string
		want string
	}{
		{"file://" + t.TempDir(), []string{"sse=AES256"}, "option sse is for s3:// stores only"},
		{"mem://", []string{"requester_pays"}, "option requester_pays is for s3:// stores only"},
		{"mem://", []string{"checksum=off"}, "option checksum is for s3:// stores only"},
		{"file://" + t.TempDir(), []string{"endpoint=http://127.0.0.1:7070"}, "option endpoint is for s3:// stores only"},
		{"file://" + t.TempDir(), []string{"region=eu-west-1"}, "option region is for s3:// stores only"},
		{"mem://", []string{"profile=prod"}, "option profile is for s3:// stores only"},
		{"mem://", []string{"path_style"}, "option path_style is for s3:// stores only"},
		{"file://" + t.TempDir(), []string{"credentials_file=/etc/ckptfs/keys"}, "option credentials_file is for s3:// stores only"},
		{"mem://", []string{"passwd_file=/etc/passwd-s3fs"}, "option credentials_file is for s3:// stores only"},
		{s3, []string{"credentials_file=/no/such/keys"}, "credentials file /no/such/keys: no such file: create it with"},
		{s3, []string{"sse=aes256"}, `sse "aes256": want AES256, aws:kms or aws:kms:dsse`},
		{s3, []string{"sse_kms_key_id=k"}, "sse_kms_key_id needs sse=aws:kms or sse=aws:kms:dsse"},
		{s3, []string{"sse=AES256", "sse_kms_key_id=k"}, "sse_kms_key_id needs sse=aws:kms"},
		{s3, []string{"storage_class=standard-ia"}, `storage class "STANDARD-IA"`}, // any case is read, not any word
		{s3, []string{"checksum=md5"}, `checksum "md5": want crc32c, crc32, crc64nvme or off`},
		{s3, []string{"ca_bundle=/no/such/ca.pem"}, "ca_bundle: open /no/such/ca.pem"},
	} {
		so, _, err := takeStoreOpts(tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if tc.spec == s3 {
			so.endpoint, so.region, so.pathStyle = base.endpoint, base.region, base.pathStyle
		}
		_, _, err = openStore(ctx, tc.spec, so)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("openStore(%s, %q) = %v, want an error with %q", tc.spec, tc.opts, err, tc.want)
		}
	}
}

// TestToolsTakeS3Options: format and ls reach a real bucket with the S3
// options set.
func TestToolsTakeS3Options(t *testing.T) {
	c := s3test.Config(t)
	t.Setenv("AWS_ACCESS_KEY_ID", c.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", c.SecretKey)
	store := "s3://" + c.Bucket + "/" + strings.TrimSuffix(c.Prefix, "/")
	opts := "endpoint=" + c.Endpoint + ",path_style,region=" + c.Region + ",checksum=crc32,storage_class=STANDARD,requester_pays"
	for _, args := range [][]string{{"ckptfs", "format", "-o", opts, store}, {"ckptfs", "ls", "-o", opts, store}} {
		var out, errOut strings.Builder
		if code := run(args, &out, &errOut); code != 0 {
			t.Fatalf("%q exited %d: %s", args, code, errOut.String())
		}
	}
	var out, errOut strings.Builder
	if code := run([]string{"ckptfs", "ls", "-o", opts + ",checksum=sha1", store}, &out, &errOut); code == 0 || !strings.Contains(errOut.String(), `checksum "sha1"`) {
		t.Errorf("ls with checksum=sha1: exit %d, %q", code, errOut.String())
	}
}
