package config

import (
	"testing"
	"testing/fstest"
)

func TestParseProcCgroup(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		v2, v1  cgroupPath
		wantErr bool
	}{
		{"v2 only", "0::/user.slice/user-1000.slice/session-2.scope\n", cgroupPath{"/user.slice/user-1000.slice/session-2.scope", true}, cgroupPath{}, false},
		{"v2 in a namespace", "0::/\n", cgroupPath{"/", true}, cgroupPath{}, false},
		{"v1 hybrid", "9:name=systemd:/\n4:memory:/process_api/b681\n3:cpuset:/\n0::/\n", cgroupPath{"/", true}, cgroupPath{"/process_api/b681", true}, false},
		{"v1 joined controllers", "5:memory,hugetlb:/docker/abc\n", cgroupPath{}, cgroupPath{"/docker/abc", true}, false},
		{"no trailing newline", "0::/a", cgroupPath{"/a", true}, cgroupPath{}, false},
		{"empty", "", cgroupPath{}, cgroupPath{}, false},
		{"memory as a prefix is not memory", "4:memoryx:/a\n", cgroupPath{}, cgroupPath{}, false},
		{"dot-dot refused", "0::/../../etc\n", cgroupPath{}, cgroupPath{}, true},
		{"relative path refused", "0::a/b\n", cgroupPath{}, cgroupPath{}, true},
		{"unclean path refused", "0::/a//b\n", cgroupPath{}, cgroupPath{}, true},
		{"no colons", "garbage\n", cgroupPath{}, cgroupPath{}, true},
		{"bad id", "x::/a\n", cgroupPath{}, cgroupPath{}, true},
		{"empty id", "::/a\n", cgroupPath{}, cgroupPath{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v2, v1, err := parseProcCgroup([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && (v2 != tt.v2 || v1 != tt.v1) {
				t.Fatalf("= %+v, %+v; want %+v, %+v", v2, v1, tt.v2, tt.v1)
			}
		})
	}
}

func TestParseCgroupLimit(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		ok      bool
		wantErr bool
	}{
		{"max\n", 0, false, false},
		{"max", 0, false, false},
		{"536870912\n", 512 << 20, true, false},
		{"9223372036854771712\n", 9223372036854771712, true, false},
		{"0\n", 0, true, false},
		{"-1\n", 0, false, true},
		{"1G\n", 0, false, true},
		{"", 0, false, true},
		{"18446744073709551616\n", 0, false, true},
		{" 5\n", 0, false, true},
	}
	for _, tt := range tests {
		got, ok, err := parseCgroupLimit([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want || ok != tt.ok {
			t.Errorf("parseCgroupLimit(%q) = %d, %v, %v; want %d, %v, error %v", tt.in, got, ok, err, tt.want, tt.ok, tt.wantErr)
		}
	}
}

// TestTotalRAMCgroup: TotalRAM is min(MemTotal, the lowest cgroup limit of
// the process's cgroup and its ancestors), v2 and v1.
func TestTotalRAMCgroup(t *testing.T) {
	const meminfo = "MemTotal:       16777216 kB\nMemFree: 1 kB\n" // 16 GiB
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name  string
		files fstest.MapFS
		want  uint64
	}{
		{"no cgroup file", fstest.MapFS{"proc/meminfo": file(meminfo)}, 16 << 30},
		{"no meminfo", fstest.MapFS{"proc/self/cgroup": file("0::/\n"), "sys/fs/cgroup/memory.max": file("1048576\n")}, 0},
		{"v2 max", fstest.MapFS{"proc/meminfo": file(meminfo), "proc/self/cgroup": file("0::/a\n"),
			"sys/fs/cgroup/a/memory.max": file("max\n")}, 16 << 30},
		{"v2 limit", fstest.MapFS{"proc/meminfo": file(meminfo), "proc/self/cgroup": file("0::/a/b\n"),
			"sys/fs/cgroup/a/b/memory.max": file("2147483648\n")}, 2 << 30},
		{"v2 ancestor's limit binds", fstest.MapFS{"proc/meminfo": file(meminfo), "proc/self/cgroup": file("0::/a/b\n"),
			"sys/fs/cgroup/a/b/memory.max": file("max\n"), "sys/fs/cgroup/a/memory.max": file("1073741824\n")}, 1 << 30},
		{"v2 container top", fstest.MapFS{"proc/meminfo": file(meminfo), "proc/self/cgroup": file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("536870912\n")}, 512 << 20},
		{"limit above MemTotal", fstest.MapFS{"proc/meminfo": file(meminfo), "proc/self/cgroup": file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("68719476736\n")}, 16 << 30},
		{"v1 unlimited", fstest.MapFS{"proc/meminfo": file(meminfo), "proc/self/cgroup": file("4:memory:/x\n0::/\n"),
			"sys/fs/cgroup/memory/x/memory.limit_in_bytes": file("9223372036854771712\n")}, 16 << 30},
		{"v1 limit", fstest.MapFS{"proc/meminfo": file(meminfo), "proc/self/cgroup": file("4:memory:/x\n0::/\n"),
			"sys/fs/cgroup/memory/x/memory.limit_in_bytes": file("3221225472\n")}, 3 << 30},
		{"v1 path not in this namespace: the top", fstest.MapFS{"proc/meminfo": file(meminfo), "proc/self/cgroup": file("4:memory:/docker/abc\n"),
			"sys/fs/cgroup/memory/memory.limit_in_bytes": file("1073741824\n")}, 1 << 30},
		{"bad limit is none", fstest.MapFS{"proc/meminfo": file(meminfo), "proc/self/cgroup": file("0::/\n"),
			"sys/fs/cgroup/memory.max": file("lots\n")}, 16 << 30},
		{"bad cgroup file is none", fstest.MapFS{"proc/meminfo": file(meminfo), "proc/self/cgroup": file("0::/../x\n"),
			"sys/fs/cgroup/memory.max": file("1048576\n"), "sys/x/memory.max": file("1048576\n")}, 16 << 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := totalRAM(tt.files); got != tt.want {
				t.Fatalf("totalRAM = %d, want %d", got, tt.want)
			}
		})
	}
}
