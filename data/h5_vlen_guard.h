// A check before HDF5 reads a variable-length string attribute of a file
// that may be damaged.
//
// Such an attribute stores no text, only a reference into the file's global
// heap: the string's length, the heap collection's address and the object's
// index there. HDF5 1.10 (Debian 12's) follows that reference without
// checking it: an index past the collection's objects, one flipped byte,
// reads out of bounds inside H5Aread and kills the process with a signal
// instead of returning an error (tests/src/fuzz_test.py found it in a token
// file's `text_encoder`). So before such a read the reader finds the stored
// reference in the object header and checks it against the collection,
// from the file's own bytes (the HDF5 file format specification's layouts:
// superblock, version 1 and 2 object headers and their continuations,
// attribute messages 1-3, global heap collections).
#pragma once

#include <hdf5.h>

#include <string>

namespace fsdp {

// For the variable-length string attribute `name` (one element) of the
// object `holder` in the open file `file`: "" when the string its stored
// reference names is there (a well-formed global heap collection holding
// that object at that length), else what is wrong, for an error line.
// Also "" where the attribute is kept outside the object header (dense
// attribute storage, a shared message), which this does not follow; HDF5's
// own read decides there. Every file tools/prepare_data.py writes keeps its
// few attributes in the header.
std::string vlen_attr_damage(hid_t file, hid_t holder, const char* name);

}  // namespace fsdp
