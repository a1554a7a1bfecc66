package test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// repoRoot is the checkout this test file is in.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Dir(filepath.Dir(file))
}

// TestPackage builds the .deb with scripts/release, installs it with dpkg -i,
// and mounts a file:// volume through an /etc/fstab line with mount -a, as
// an operator would; then it removes the package and the line. It changes
// the machine, so it runs only when asked (CKPTFS_PACKAGE_TEST=1, or CI=true)
// as root with dpkg; runs of several checkouts take turns on a lock.
func TestPackage(t *testing.T) {
	if os.Getenv("CKPTFS_PACKAGE_TEST") != "1" && os.Getenv("CI") != "true" {
		t.Skip("installs a package and edits /etc/fstab: set CKPTFS_PACKAGE_TEST=1 to run it")
	}
	if os.Geteuid() != 0 {
		t.Skip("dpkg -i and mount -a need root")
	}
	for _, p := range []string{"dpkg", "dpkg-deb", "dpkg-query"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("no %s: not a Debian machine", p)
		}
	}
	need(t, "fusermount3", "mount", "umount")
	lockMachine(t, "/run/lock/ckptfs-package-test.lock")

	if out, err := runErr("", "dpkg-query", "-W", "-f=${Status}", "ckptfs"); err == nil && strings.Contains(out, " installed") {
		t.Fatalf("the package ckptfs is installed already (%s); the test would remove it: dpkg -r ckptfs first", out)
	}
	for _, p := range []string{"/usr/bin/ckptfs", "/sbin/mount.ckptfs"} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("%s exists: the package would replace it", p)
		}
	}

	// Build: the Go build cache holds every package after the first run,
	// so this is mostly the link (and xz -1).
	dist := t.TempDir()
	start := time.Now()
	if out, err := runErr("", filepath.Join(repoRoot(t), "scripts", "release"), "-a", runtime.GOARCH, "-o", dist, "--fast"); err != nil {
		t.Fatalf("scripts/release: %v\n%s", err, out)
	}
	t.Logf("scripts/release -a %s: %v", runtime.GOARCH, time.Since(start).Round(time.Millisecond))
	debs, _ := filepath.Glob(filepath.Join(dist, "ckptfs_*_"+runtime.GOARCH+".deb"))
	bins, _ := filepath.Glob(filepath.Join(dist, "ckptfs-*-linux-"+runtime.GOARCH))
	if len(debs) != 1 || len(bins) != 1 {
		t.Fatalf("scripts/release wrote %v and %v, want one .deb and one binary", debs, bins)
	}
	deb, bin := debs[0], bins[0]
	if fi, err := os.Stat(deb); err == nil {
		t.Logf("%s: %d bytes", filepath.Base(deb), fi.Size())
	}
	if out := run(t, "", "dpkg-deb", "-f", deb, "Depends"); !strings.Contains(out, "fuse3") {
		t.Fatalf("Depends: %q, want fuse3", out)
	}
	wantVersion := strings.TrimSpace(run(t, "", bin, "--version"))

	// Cleanups run last first: unmount, restore /etc/fstab, remove the
	// package.
	t.Cleanup(func() {
		if out, err := runErr("", "dpkg", "--purge", "ckptfs"); err != nil {
			t.Errorf("dpkg --purge ckptfs: %v\n%s", err, out)
		}
	})
	restoreFstab := keepFstab(t)
	t.Cleanup(restoreFstab)

	if out, err := runErr("", "dpkg", "-i", deb); err != nil {
		t.Fatalf("dpkg -i: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(run(t, "", "/usr/bin/ckptfs", "--version")); got != wantVersion {
		t.Fatalf("installed ckptfs --version: %q, want %q", got, wantVersion)
	}
	if target, err := filepath.EvalSymlinks("/sbin/mount.ckptfs"); err != nil || target != "/usr/bin/ckptfs" {
		t.Fatalf("/sbin/mount.ckptfs leads to %q (%v), want /usr/bin/ckptfs", target, err)
	}
	checkManPage(t, "/usr/share/man/man1/ckptfs-mount.1.gz")
	checkManPage(t, "/usr/share/man/man8/mount.ckptfs.8.gz")
	if _, err := exec.LookPath("man"); err == nil {
		if got := strings.TrimSpace(run(t, "", "man", "-w", "ckptfs")); got != "/usr/share/man/man1/ckptfs.1.gz" {
			t.Errorf("man -w ckptfs: %q", got)
		}
		if got := strings.TrimSpace(run(t, "", "man", "-w", "mount.ckptfs")); got != "/usr/share/man/man8/mount.ckptfs.8.gz" {
			t.Errorf("man -w mount.ckptfs: %q", got)
		}
	}
	// The logrotate file, a conffile: rotation without a signal.
	rot, err := os.ReadFile("/etc/logrotate.d/ckptfs")
	if err != nil || !bytes.Contains(rot, []byte("/var/log/ckptfs.log")) || !bytes.Contains(rot, []byte("copytruncate")) {
		t.Fatalf("/etc/logrotate.d/ckptfs: %v\n%s", err, rot)
	}
	if out := run(t, "", "dpkg-query", "-W", "-f=${Conffiles}", "ckptfs"); !strings.Contains(out, "/etc/logrotate.d/ckptfs ") {
		t.Errorf("conffiles: %q, want /etc/logrotate.d/ckptfs", out)
	}
	if _, err := exec.LookPath("logrotate"); err == nil {
		// -d reads the configuration and rotates nothing.
		if out, err := runErr("", "logrotate", "-d", "-s", filepath.Join(t.TempDir(), "state"), "/etc/logrotate.d/ckptfs"); err != nil ||
			strings.Contains(out, "error:") {
			t.Errorf("logrotate -d /etc/logrotate.d/ckptfs: %v\n%s", err, out)
		}
	}
	unit, err := os.ReadFile("/usr/lib/systemd/system/ckptfs@.service")
	if err != nil || !bytes.Contains(unit, []byte("ExecStart=/usr/bin/ckptfs mount -f")) {
		t.Fatalf("the systemd unit: %v\n%s", err, unit)
	}
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		// An instance of the template, as systemctl would load it; verify
		// works without a running systemd.
		inst := filepath.Join(t.TempDir(), "ckptfs@check.service")
		if err := os.WriteFile(inst, unit, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := runErr("", "systemd-analyze", "verify", "--man=no", inst); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("systemd-analyze verify ckptfs@.service: %v\n%s", err, out)
		}
		// The timed cleaner: the timer and the service it starts.
		var insts []string
		for _, u := range []string{"ckptfs-gc@.service", "ckptfs-gc@.timer"} {
			b, err := os.ReadFile("/usr/lib/systemd/system/" + u)
			if err != nil {
				t.Fatalf("the systemd unit %s: %v", u, err)
			}
			p := filepath.Join(t.TempDir(), strings.Replace(u, "@", "@check", 1))
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			insts = append(insts, p)
		}
		if out, err := runErr("", "systemd-analyze", append([]string{"verify", "--man=no"}, insts...)...); err != nil || strings.TrimSpace(out) != "" {
			t.Errorf("systemd-analyze verify ckptfs-gc@.service ckptfs-gc@.timer: %v\n%s", err, out)
		}
	}

	// A volume, formatted by the installed binary, and its fstab line.
	work := t.TempDir()
	store := "file://" + filepath.Join(work, "store")
	dir := filepath.Join(work, "mnt")
	logFile := filepath.Join(work, "ckptfs.log")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "", "/usr/bin/ckptfs", "format", store)
	line := fmt.Sprintf("%s %s ckptfs noatime,log_file=%s 0 0\n", store, dir, logFile)
	f, err := os.OpenFile("/etc/fstab", os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, werr := f.WriteString(line)
	if err := errors.Join(werr, f.Close()); err != nil {
		t.Fatalf("append to /etc/fstab: %v", err)
	}
	t.Cleanup(func() { unmountAndWait(t, dir, store) })

	// -t ckptfs: only ckptfs lines, whatever else the machine's fstab holds.
	if out, err := runErr("", "mount", "-a", "-t", "ckptfs"); err != nil {
		b, _ := os.ReadFile(logFile)
		t.Fatalf("mount -a -t ckptfs: %v\n%s\nlog:\n%s", err, out, b)
	}
	if info := mountInfo(t, dir); !strings.Contains(info, " - fuse.ckptfs ") && !strings.Contains(info, " - fuse ") {
		t.Fatalf("%s after mount -a: %q, want a FUSE mount", dir, info)
	}
	run(t, "", "sh", "-c", `echo written through fstab > "$0"/greeting`, dir)
	if got := run(t, "", "cat", filepath.Join(dir, "greeting")); got != "written through fstab\n" {
		t.Fatalf("greeting read back through the mount: %q", got)
	}
	unmountAndWait(t, dir, store)
	if got := run(t, "", "/usr/bin/ckptfs", "cat", store, "/greeting"); got != "written through fstab\n" {
		t.Fatalf("ckptfs cat after umount: %q", got)
	}
	if b, err := os.ReadFile(logFile); err != nil || !bytes.Contains(b, []byte("unmounted")) {
		t.Errorf("the mount's log_file does not say unmounted (%v):\n%s", err, b)
	}

	restoreFstab()
	if out, err := runErr("", "dpkg", "-r", "ckptfs"); err != nil {
		t.Fatalf("dpkg -r: %v\n%s", err, out)
	}
	for _, p := range []string{"/usr/bin/ckptfs", "/sbin/mount.ckptfs", "/usr/share/man/man1/ckptfs.1.gz"} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after dpkg -r: %v, want gone", p, err)
		}
	}
}

// lockMachine holds an exclusive lock on path until the test ends: tests of
// other checkouts on the machine install the same package.
func lockMachine(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		t.Fatalf("lock %s: %v", path, err)
	}
	t.Cleanup(func() { _ = f.Close() }) // closing releases the lock
}

// keepFstab saves /etc/fstab and returns what puts it back byte for byte
// (safe to call twice).
func keepFstab(t *testing.T) func() {
	t.Helper()
	const path = "/etc/fstab"
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		if now, err := os.ReadFile(path); err == nil && bytes.Equal(now, orig) {
			return
		}
		// In place, not by rename: /etc/fstab may be a bind mount.
		if err := os.WriteFile(path, orig, fi.Mode().Perm()); err != nil {
			t.Errorf("restore %s: %v", path, err)
		}
	}
}

// checkManPage checks that path is a gzipped man page.
func checkManPage(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b, err := io.ReadAll(z)
	if err != nil || !bytes.Contains(b, []byte(".TH ")) {
		t.Fatalf("%s is not a man page (%v):\n%.200s", path, err, b)
	}
}

// unmountAndWait unmounts dir when it is mounted and waits for the mount
// process of store to exit: it flushes after the unmount, into a directory
// the test removes.
func unmountAndWait(t *testing.T, dir, store string) {
	t.Helper()
	if isMounted(t, dir) {
		if out, err := runErr("", "umount", dir); err != nil {
			t.Errorf("umount %s: %v\n%s", dir, err, out)
			_, _ = runErr("", "umount", "-l", dir)
		}
	}
	if isMounted(t, dir) {
		t.Fatalf("%s is still mounted after umount", dir)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		pids := processesWithArg(store)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mount process (pid %v) did not exit within 30s of the unmount", pids)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processesWithArg lists the processes that have arg among their
// arguments.
func processesWithArg(arg string) []string {
	entries, _ := os.ReadDir("/proc")
	var pids []string
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			if a == arg {
				pids = append(pids, e.Name())
				break
			}
		}
	}
	return pids
}

// podSpec is what TestContainerFiles reads of scripts/container/pod.yaml.
type podSpec struct {
	Kind string `yaml:"kind"`
	Spec struct {
		Volumes []struct {
			Name     string    `yaml:"name"`
			EmptyDir *struct{} `yaml:"emptyDir"`
			HostPath *struct {
				Path string `yaml:"path"`
				Type string `yaml:"type"`
			} `yaml:"hostPath"`
		} `yaml:"volumes"`
		InitContainers []podContainer `yaml:"initContainers"`
		Containers     []podContainer `yaml:"containers"`
	} `yaml:"spec"`
}

type podContainer struct {
	Name            string   `yaml:"name"`
	Image           string   `yaml:"image"`
	RestartPolicy   string   `yaml:"restartPolicy"`
	Command         []string `yaml:"command"`
	Args            []string `yaml:"args"`
	SecurityContext struct {
		Privileged   bool `yaml:"privileged"`
		Capabilities struct {
			Add []string `yaml:"add"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name             string `yaml:"name"`
		MountPath        string `yaml:"mountPath"`
		MountPropagation string `yaml:"mountPropagation"`
	} `yaml:"volumeMounts"`
}

// TestContainerFiles checks the Pod manifest and the Dockerfile of
// docs/containers.md as far as a machine without a container runtime or a
// cluster can: what a FUSE mount needs of the Pod, and that the image's
// build stage builds the binary as scripts/release does.
func TestContainerFiles(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "scripts", "container", "pod.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pod podSpec // the fields a mount depends on; the rest is not read
	if err := yaml.Unmarshal(b, &pod); err != nil {
		t.Fatalf("pod.yaml: %v", err)
	}
	if pod.Kind != "Pod" {
		t.Fatalf("pod.yaml: kind %q", pod.Kind)
	}
	var sidecar, app *podContainer
	for i, c := range pod.Spec.InitContainers {
		if c.Name == "ckptfs" {
			sidecar = &pod.Spec.InitContainers[i]
		}
	}
	for i, c := range pod.Spec.Containers {
		if c.Name == "app" {
			app = &pod.Spec.Containers[i]
		}
	}
	if sidecar == nil || app == nil {
		t.Fatalf("pod.yaml: want an init container ckptfs and a container app")
	}
	if sidecar.RestartPolicy != "Always" {
		t.Errorf("the ckptfs sidecar: restartPolicy %q, want Always (a native sidecar)", sidecar.RestartPolicy)
	}
	sc := sidecar.SecurityContext
	// Bidirectional propagation is refused to a container that is not
	// privileged; SYS_ADMIN alone would do for the mount itself.
	if !sc.Privileged {
		t.Errorf("the ckptfs sidecar is not privileged: Bidirectional mount propagation needs it")
	}
	hasSysAdmin := false
	for _, c := range sc.Capabilities.Add {
		hasSysAdmin = hasSysAdmin || c == "SYS_ADMIN"
	}
	if !sc.Privileged && !hasSysAdmin {
		t.Errorf("the ckptfs sidecar has neither privileged nor SYS_ADMIN")
	}

	volumes := map[string]string{} // name: "emptyDir" or the hostPath
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.EmptyDir != nil:
			volumes[v.Name] = "emptyDir"
		case v.HostPath != nil:
			volumes[v.Name] = v.HostPath.Path
			if v.HostPath.Path == "/dev/fuse" && v.HostPath.Type != "CharDevice" {
				t.Errorf("the /dev/fuse hostPath has type %q, want CharDevice", v.HostPath.Type)
			}
		}
	}
	devFuse, shared, sidecarAt, appAt := false, "", "", ""
	for _, m := range sidecar.VolumeMounts {
		switch {
		case m.MountPath == "/dev/fuse" && volumes[m.Name] == "/dev/fuse":
			devFuse = true
		case m.MountPropagation == "Bidirectional" && volumes[m.Name] == "emptyDir":
			shared, sidecarAt = m.Name, m.MountPath
		}
	}
	if !devFuse {
		t.Errorf("the ckptfs sidecar mounts no hostPath /dev/fuse at /dev/fuse")
	}
	if shared == "" {
		t.Fatalf("the ckptfs sidecar mounts no emptyDir with mountPropagation Bidirectional")
	}
	for _, m := range app.VolumeMounts {
		if m.Name == shared {
			if m.MountPropagation != "HostToContainer" && m.MountPropagation != "Bidirectional" {
				t.Errorf("the app mounts %s with propagation %q: it would not see the ckptfs mount", shared, m.MountPropagation)
			}
			appAt = m.MountPath
		}
	}
	if appAt == "" {
		t.Fatalf("the app does not mount the shared volume %s", shared)
	}
	// The mount point: the argument after the store in "ckptfs mount".
	cmdline := strings.Join(append(append([]string{}, sidecar.Command...), sidecar.Args...), " ")
	f := strings.Fields(cmdline[strings.Index(cmdline, "ckptfs mount"):])
	if len(f) < 2 || !strings.Contains(cmdline, "-f") || !strings.Contains(cmdline, "allow_other") {
		t.Fatalf("the sidecar's command %q: want ckptfs mount -f with allow_other", cmdline)
	}
	mnt := f[len(f)-1]
	if !strings.HasPrefix(mnt, sidecarAt+"/") {
		t.Errorf("the sidecar mounts on %s, want a directory inside the shared volume %s (the volume's own path is a mount point)", mnt, sidecarAt)
	}
	appPath := appAt + strings.TrimPrefix(mnt, sidecarAt)
	if !strings.Contains(strings.Join(app.Args, " "), appPath) {
		t.Errorf("the app's command does not use %s, where the mount shows in it", appPath)
	}

	checkDockerfile(t, root)
}

// checkDockerfile checks scripts/container/Dockerfile: two stages, the
// first building ./cmd/ckptfs statically, the second installing fuse3 and
// copying the binary from the first; and, without -short, runs the build
// stage's go build here.
func checkDockerfile(t *testing.T, root string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "scripts", "container", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// Instructions, with continuation lines joined and comments dropped.
	var instrs []string
	cur := ""
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || (line == "" && cur == "") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			cur += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		if s := strings.TrimSpace(cur + line); s != "" {
			instrs = append(instrs, s)
		}
		cur = ""
	}
	var froms []string
	var goBuild, install, copyBin string
	for _, in := range instrs {
		switch kw := strings.ToUpper(strings.Fields(in)[0]); {
		case kw == "FROM":
			froms = append(froms, in)
		case kw == "RUN" && strings.Contains(in, "go build") && len(froms) == 1:
			goBuild = strings.TrimSpace(in[len("RUN"):])
		case kw == "RUN" && strings.Contains(in, "apt-get install") && len(froms) == 2:
			install = in
		case kw == "COPY" && strings.Contains(in, "--from=build") && len(froms) == 2:
			copyBin = in
		}
	}
	if len(froms) != 2 || !strings.HasSuffix(froms[0], " AS build") || !strings.Contains(froms[1], "slim") {
		t.Fatalf("Dockerfile stages %q: want a build stage (AS build) and a slim image", froms)
	}
	if !strings.Contains(goBuild, "CGO_ENABLED=0") || !strings.Contains(goBuild, " ./cmd/ckptfs") {
		t.Fatalf("Dockerfile build stage: %q, want CGO_ENABLED=0 go build ... ./cmd/ckptfs", goBuild)
	}
	if !strings.Contains(install, " fuse3") {
		t.Errorf("Dockerfile image installs no fuse3: %q", install)
	}
	if !strings.HasSuffix(copyBin, " /usr/bin/ckptfs") {
		t.Errorf("Dockerfile image: %q, want the binary copied to /usr/bin/ckptfs", copyBin)
	}
	if out, err := runErr(root, "go", "list", "-f", "{{.Name}}", "./cmd/ckptfs"); err != nil || strings.TrimSpace(out) != "main" {
		t.Fatalf("go list ./cmd/ckptfs: %v %q, want package main", err, out)
	}
	if testing.Short() {
		return
	}
	// The build stage's command, run here with the binary written to a
	// temporary file: what the image would hold builds from this tree.
	bin := filepath.Join(t.TempDir(), "ckptfs")
	cmd := strings.Replace(goBuild, "-o /out/ckptfs", "-o "+bin, 1)
	if cmd == goBuild {
		t.Fatalf("Dockerfile build stage %q does not write /out/ckptfs", goBuild)
	}
	if out, err := runErr(root, "sh", "-c", cmd); err != nil {
		t.Fatalf("the Dockerfile's build command: %v\n%s", err, out)
	}
	if out := run(t, "", bin, "--version"); !strings.HasPrefix(out, "ckptfs ") {
		t.Fatalf("the built binary's --version: %q", out)
	}
}
