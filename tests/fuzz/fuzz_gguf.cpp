// libFuzzer target for the GGUF reader: any byte string must parse to an Error or to a table whose every
// tensor lies inside the input; ASan catches any read outside it. Every metadata value is also rendered
// and read through the typed getters, so those paths see fuzzed values too.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "format/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto r = dsv4::GgufFile::parse(data, size, "fuzz.gguf");
    if (!r.ok()) return 0;
    const dsv4::GgufFile& f = **r;
    for (const auto& [key, value] : f.metadata()) {
        (void)dsv4::gguf_value_str(value);
        (void)f.get_u32(key);
        (void)f.get_i64(key);
        (void)f.get_f32(key);
        (void)f.get_str(key);
        (void)f.get_arr_u32(key);
        (void)f.get_arr_i32(key);
        (void)f.get_arr_f32(key);
        (void)f.get_arr_str(key);
    }
    unsigned sum = 0;
    for (const dsv4::GgufTensor& t : f.tensors()) {
        if (t.data < data || t.n_bytes > size || t.data + t.n_bytes > data + size) std::abort();
        // Touch the first and last byte so ASan checks the range is real memory of the input.
        if (t.n_bytes) sum += t.data[0] + t.data[t.n_bytes - 1];
    }
    return (int)(sum & 0);
}
