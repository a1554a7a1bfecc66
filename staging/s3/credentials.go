package s3

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"
)

// ErrCredentialsFile is the kind of every error of a credentials file (the
// Config's CredentialsFile): missing, unreadable, open to other users or
// malformed. Its message is one line that names the file and the fix.
var ErrCredentialsFile = errors.New("credentials file")

// credsFileError is one problem of a credentials file: what is wrong and
// what to do, naming the file. It never holds the file's text, which holds
// secrets.
type credsFileError struct {
	path, what, fix string
	err             error
}

func (e *credsFileError) Error() string {
	return fmt.Sprintf("credentials file %s: %s: %s", e.path, e.what, e.fix)
}

func (e *credsFileError) Unwrap() []error { return []error{ErrCredentialsFile, e.err} }

// fileKeys are the keys a credentials file holds.
type fileKeys struct {
	access, secret, token string
	ini                   bool // the file is in AWS's format
}

// credentialsFileMost bounds what is read of a credentials file: a few
// lines of keys, not a log file named by mistake.
const credentialsFileMost = 1 << 20

// credsFileFormat says how to write a credentials file, for a message.
const credsFileFormat = `"[default]" then "aws_access_key_id = KEY" and "aws_secret_access_key = SECRET" lines (AWS's credentials file), or one ACCESS_KEY:SECRET_KEY line (s3fs's passwd file)`

// readCredentialsFile reads the keys for bucket from the file at path,
// which is either an AWS shared credentials file (INI sections; profile
// names the section, "" is default) or an s3fs passwd file (lines of
// ACCESS_KEY:SECRET_KEY, or BUCKET:ACCESS_KEY:SECRET_KEY for one bucket),
// told apart by its first line that is not blank or a comment: "[" begins
// an INI section. As s3fs does, it refuses a file any other user may read
// or write: the keys are worth more than a mount.
func readCredentialsFile(ctx context.Context, path, profile, bucket string) (fileKeys, error) {
	fail := func(what, fix string, err error) (fileKeys, error) {
		return fileKeys{}, &credsFileError{path: path, what: what, fix: fix, err: err}
	}
	f, err := os.Open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail("no such file", "create it with "+credsFileFormat+", mode 600, or give credentials_file= the right path", err)
	case errors.Is(err, fs.ErrPermission):
		return fail(fmt.Sprintf("not readable by uid %d", os.Geteuid()), "make the user the mount runs as its owner (chown) with mode 600", err)
	case err != nil:
		return fail(err.Error(), "give credentials_file= a readable file", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fail(err.Error(), "give credentials_file= a readable file", err)
	}
	if !st.Mode().IsRegular() {
		return fail("not a regular file", "give credentials_file= the file of keys", nil)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fail(fmt.Sprintf("open to group or others (mode %04o), and it holds secret keys", perm), "chmod 600 "+path, nil)
	}
	b, err := io.ReadAll(io.LimitReader(f, credentialsFileMost+1))
	if err != nil {
		return fail(err.Error(), "give credentials_file= a readable file", err)
	}
	if len(b) > credentialsFileMost {
		return fail(fmt.Sprintf("larger than %d KiB", credentialsFileMost>>10), "give credentials_file= the file of keys", nil)
	}
	if isINI(b) {
		return iniKeys(ctx, path, profile)
	}
	if profile != "" {
		return fail("profile= names a section of an AWS credentials file, and this is an s3fs passwd file (no sections)",
			"drop profile=, or write the file in AWS's format", nil)
	}
	return passwdKeys(path, b, bucket)
}

// isINI reports whether the first line of b that is not blank or a
// comment begins a section.
func isINI(b []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, credentialsFileMost+1)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		return line[0] == '['
	}
	return false
}

// iniKeys reads the keys of profile ("" is default) from an AWS shared
// credentials file with the SDK's own reader.
func iniKeys(ctx context.Context, path, profile string) (fileKeys, error) {
	if profile == "" {
		profile = "default"
	}
	sc, err := config.LoadSharedConfigProfile(ctx, profile, func(o *config.LoadSharedConfigOptions) {
		o.CredentialsFiles = []string{path}
		o.ConfigFiles = []string{}
	})
	var missing config.SharedConfigProfileNotExistError
	switch {
	case errors.As(err, &missing):
		return fileKeys{}, &credsFileError{path: path, what: fmt.Sprintf("no [%s] section", profile),
			fix: "add one with aws_access_key_id and aws_secret_access_key, or name a section of the file with profile=", err: err}
	case err != nil && strings.Contains(err.Error(), "partial credentials"):
		// The SDK's words for a section with one key of the two.
		err = nil
	case err != nil:
		// Not the reader's words: they might quote a line of the file.
		return fileKeys{}, &credsFileError{path: path, what: "not readable as an AWS credentials file",
			fix: "write it as " + credsFileFormat, err: err}
	}
	c := sc.Credentials
	if c.AccessKeyID == "" || c.SecretAccessKey == "" {
		return fileKeys{}, &credsFileError{path: path, what: fmt.Sprintf("section [%s] lacks aws_access_key_id or aws_secret_access_key", profile),
			fix: "give both, as \"aws_access_key_id = KEY\" and \"aws_secret_access_key = SECRET\" lines"}
	}
	return fileKeys{access: c.AccessKeyID, secret: c.SecretAccessKey, token: c.SessionToken, ini: true}, nil
}

// passwdKeys reads an s3fs passwd file: lines of ACCESS_KEY:SECRET_KEY, the
// keys of every bucket, or BUCKET:ACCESS_KEY:SECRET_KEY, those of one bucket,
// which win; blank lines and lines starting with # are skipped. A line that
// is neither is an error naming its number, not its text.
func passwdKeys(path string, b []byte, bucket string) (fileKeys, error) {
	var every, mine *fileKeys
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, credentialsFileMost+1)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Split(line, ":")
		for _, s := range f {
			if s == "" || strings.ContainsAny(s, " \t") {
				f = nil
				break
			}
		}
		switch len(f) {
		case 2:
			if every == nil {
				every = &fileKeys{access: f[0], secret: f[1]}
			}
		case 3:
			if f[0] == bucket && mine == nil {
				mine = &fileKeys{access: f[1], secret: f[2]}
			}
		default:
			return fileKeys{}, &credsFileError{path: path, what: fmt.Sprintf("line %d is not ACCESS_KEY:SECRET_KEY or BUCKET:ACCESS_KEY:SECRET_KEY", n),
				fix: "write it as " + credsFileFormat}
		}
	}
	switch {
	case mine != nil:
		return *mine, nil
	case every != nil:
		return *every, nil
	}
	return fileKeys{}, &credsFileError{path: path, what: "no keys for bucket " + bucket,
		fix: "add an ACCESS_KEY:SECRET_KEY line, or " + bucket + ":ACCESS_KEY:SECRET_KEY"}
}
