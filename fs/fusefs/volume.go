package fusefs

import "github.com/ckptfs/ckptfs/fs/volume"

// The volume descriptor and the layout of the bucket are package
// fs/volume's; these two names stay for the command line's mount, which
// names them in its messages.

// VolumeKey is the key of the volume descriptor under the root.
const VolumeKey = volume.DescriptorKey

// ErrNoVolume: there is no volume descriptor under the root and
// Options.RequireVolume refused to create one.
var ErrNoVolume = volume.ErrNoVolume
