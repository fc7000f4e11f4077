// libFuzzer target for the safetensors reader: any byte string must parse to an Error or to a table whose
// every tensor lies inside the input and holds exactly dtype x shape bytes; ASan catches any read outside it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "format/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto r = dsv4::SafetensorsFile::parse(data, size, "fuzz.safetensors");
    if (!r.ok()) return 0;
    unsigned sum = 0;
    for (const dsv4::StTensor& t : (*r)->tensors()) {
        if (t.data < data || t.n_bytes > size || t.data + t.n_bytes > data + size) std::abort();
        if ((uint64_t)t.n_elems() * dsv4::st_dtype_bytes(t.dtype) != t.n_bytes) std::abort();
        (void)t.shape_str();
        if (t.n_bytes) sum += t.data[0] + t.data[t.n_bytes - 1];
    }
    return (int)(sum & 0);
}
