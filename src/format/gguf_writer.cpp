// GGUF v3 writer: encodes metadata and tensor infos up front, then streams each tensor's bytes from its
// producer callback into the file, padding every tensor to the alignment. Only one tensor's producer runs at
// a time and nothing buffers its output, so memory stays bounded however large the file. The file is written
// under a temporary name and renamed into place, so a failed write never leaves a half file at `path`.
#include "format/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>

namespace dsv4 {

static_assert(std::endian::native == std::endian::little, "the GGUF writer emits host-order (little-endian) data");

namespace {

constexpr uint32_t kVersion = 3;
constexpr uint32_t kDefaultAlignment = 32;
constexpr std::string_view kAlignmentKey = "general.alignment";

template <class T>
void put(std::vector<uint8_t>& out, T v) {
    const size_t at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_str(std::vector<uint8_t>& out, std::string_view s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
}

uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// Bytes of one element of a numeric GGUF type (the value types the writer encodes as raw little-endian).
size_t numeric_size(GgufValueType t) {
    switch (t) {
        case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::BOOL: return 1;
        case GgufValueType::U16: case GgufValueType::I16: return 2;
        case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
        case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: return 8;
        default: return 0;
    }
}

Status write_bytes(std::FILE* out, const void* p, size_t n, const std::string& path) {
    if (n && std::fwrite(p, 1, n, out) != n)
        return make_error("cannot write '" + path + "': " + std::strerror(errno));
    return {};
}

Status write_padding(std::FILE* out, uint64_t pos, uint32_t alignment, const std::string& path) {
    static constexpr uint8_t kZeros[256] = {};
    uint64_t n = align_up(pos, alignment) - pos;
    while (n > 0) {
        const size_t chunk = (size_t)std::min<uint64_t>(n, sizeof kZeros);
        DSV4_TRY(write_bytes(out, kZeros, chunk, path));
        n -= chunk;
    }
    return {};
}

struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
};

}  // namespace

void GgufWriter::add_kv(std::string key, GgufValueType type, std::vector<uint8_t> payload, GgufValueType elem_type) {
    if (key == kAlignmentKey) return;  // owned by set_alignment()
    for (Kv& kv : kv_) {
        if (kv.key == key) {
            kv.type = type;
            kv.elem_type = elem_type;
            kv.bytes = std::move(payload);
            return;
        }
    }
    kv_.push_back(Kv{std::move(key), type, elem_type, std::move(payload)});
}

template <class T>
void GgufWriter::add_scalar(std::string key, GgufValueType type, T v) {
    std::vector<uint8_t> b;
    put<T>(b, v);
    add_kv(std::move(key), type, std::move(b));
}

template <class T>
void GgufWriter::add_array(std::string key, GgufValueType elem_type, const std::vector<T>& v) {
    std::vector<uint8_t> b;
    b.reserve(12 + v.size() * sizeof(T));
    put<uint32_t>(b, (uint32_t)elem_type);
    put<uint64_t>(b, v.size());
    for (const T& x : v) put<T>(b, x);
    add_kv(std::move(key), GgufValueType::ARRAY, std::move(b), elem_type);
}

void GgufWriter::set_u8(std::string key, uint8_t v) { add_scalar(std::move(key), GgufValueType::U8, v); }
void GgufWriter::set_i8(std::string key, int8_t v) { add_scalar(std::move(key), GgufValueType::I8, v); }
void GgufWriter::set_u16(std::string key, uint16_t v) { add_scalar(std::move(key), GgufValueType::U16, v); }
void GgufWriter::set_i16(std::string key, int16_t v) { add_scalar(std::move(key), GgufValueType::I16, v); }
void GgufWriter::set_u32(std::string key, uint32_t v) { add_scalar(std::move(key), GgufValueType::U32, v); }
void GgufWriter::set_i32(std::string key, int32_t v) { add_scalar(std::move(key), GgufValueType::I32, v); }
void GgufWriter::set_u64(std::string key, uint64_t v) { add_scalar(std::move(key), GgufValueType::U64, v); }
void GgufWriter::set_i64(std::string key, int64_t v) { add_scalar(std::move(key), GgufValueType::I64, v); }
void GgufWriter::set_f32(std::string key, float v) { add_scalar(std::move(key), GgufValueType::F32, v); }
void GgufWriter::set_f64(std::string key, double v) { add_scalar(std::move(key), GgufValueType::F64, v); }
void GgufWriter::set_bool(std::string key, bool v) {
    add_scalar(std::move(key), GgufValueType::BOOL, (uint8_t)(v ? 1 : 0));
}

void GgufWriter::set_str(std::string key, std::string v) {
    std::vector<uint8_t> b;
    put_str(b, v);
    add_kv(std::move(key), GgufValueType::STRING, std::move(b));
}

void GgufWriter::set_arr_u8(std::string key, const std::vector<uint8_t>& v) { add_array(std::move(key), GgufValueType::U8, v); }
void GgufWriter::set_arr_i8(std::string key, const std::vector<int8_t>& v) { add_array(std::move(key), GgufValueType::I8, v); }
void GgufWriter::set_arr_u16(std::string key, const std::vector<uint16_t>& v) { add_array(std::move(key), GgufValueType::U16, v); }
void GgufWriter::set_arr_i16(std::string key, const std::vector<int16_t>& v) { add_array(std::move(key), GgufValueType::I16, v); }
void GgufWriter::set_arr_u32(std::string key, const std::vector<uint32_t>& v) { add_array(std::move(key), GgufValueType::U32, v); }
void GgufWriter::set_arr_i32(std::string key, const std::vector<int32_t>& v) { add_array(std::move(key), GgufValueType::I32, v); }
void GgufWriter::set_arr_u64(std::string key, const std::vector<uint64_t>& v) { add_array(std::move(key), GgufValueType::U64, v); }
void GgufWriter::set_arr_i64(std::string key, const std::vector<int64_t>& v) { add_array(std::move(key), GgufValueType::I64, v); }
void GgufWriter::set_arr_f32(std::string key, const std::vector<float>& v) { add_array(std::move(key), GgufValueType::F32, v); }
void GgufWriter::set_arr_f64(std::string key, const std::vector<double>& v) { add_array(std::move(key), GgufValueType::F64, v); }

void GgufWriter::set_arr_bool(std::string key, const std::vector<bool>& v) {
    std::vector<uint8_t> bytes(v.begin(), v.end());  // vector<bool> is packed; GGUF wants one byte per value
    add_array(std::move(key), GgufValueType::BOOL, bytes);
}

void GgufWriter::set_arr_str(std::string key, const std::vector<std::string>& v) {
    std::vector<uint8_t> b;
    put<uint32_t>(b, (uint32_t)GgufValueType::STRING);
    put<uint64_t>(b, v.size());
    for (const std::string& s : v) put_str(b, s);
    add_kv(std::move(key), GgufValueType::ARRAY, std::move(b), GgufValueType::STRING);
}

void GgufWriter::copy_value(std::string key, const GgufValue& v) {
    std::vector<uint8_t> b;
    switch (v.type) {
        case GgufValueType::STRING: put_str(b, v.str); break;
        case GgufValueType::BOOL: put<uint8_t>(b, v.b ? 1 : 0); break;
        case GgufValueType::F32: put<float>(b, (float)v.f64); break;
        case GgufValueType::F64: put<double>(b, v.f64); break;
        case GgufValueType::ARRAY:
            put<uint32_t>(b, (uint32_t)v.elem_type);
            put<uint64_t>(b, v.n_elems);
            if (v.elem_type == GgufValueType::STRING) {
                for (std::string_view s : v.strs) put_str(b, s);
            } else {
                const size_t n = (size_t)v.n_elems * numeric_size(v.elem_type);
                if (n) b.insert(b.end(), v.elems, v.elems + n);
            }
            break;
        default: {
            // Integers: the reader mirrors the value into u64 (>= 0) or i64 (< 0); the low bytes of the
            // two's-complement form are the encoding for every width.
            const uint64_t bits = v.i64 < 0 ? (uint64_t)v.i64 : v.u64;
            const size_t n = numeric_size(v.type);
            b.resize(n);
            std::memcpy(b.data(), &bits, n);
        }
    }
    add_kv(std::move(key), v.type, std::move(b), v.elem_type);
}

Status GgufWriter::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, Producer produce) {
    const std::string tn = "tensor '" + name + "'";
    if (name.empty()) return make_error("a tensor needs a name");
    for (const Tensor& t : tensors_)
        if (t.name == name) return make_error(tn + " was added twice");
    if (ne.empty() || ne.size() > 4) return make_error(tn + " has " + std::to_string(ne.size()) + " dimensions (1 to 4)");
    const GgmlTypeTraits& traits = ggml_traits(type);
    uint64_t rows = 1;
    for (size_t i = 0; i < ne.size(); ++i) {
        if (ne[i] < 0) return make_error(tn + " has negative dimension " + std::to_string(ne[i]));
        if (i > 0 && __builtin_mul_overflow(rows, (uint64_t)ne[i], &rows)) return make_error(tn + " is too large");
    }
    if (ne[0] % traits.block_elems != 0)
        return make_error(tn + " has ne[0] = " + std::to_string(ne[0]) + ", not a multiple of the block size " +
                          std::to_string(traits.block_elems) + " of " + traits.name);
    uint64_t n_bytes = 0;
    if (__builtin_mul_overflow((uint64_t)ggml_row_bytes(traits, ne[0]), rows, &n_bytes))
        return make_error(tn + " is too large");
    if (!produce) return make_error(tn + " has no producer");
    tensors_.push_back(Tensor{std::move(name), type, std::move(ne), n_bytes, std::move(produce)});
    return {};
}

Status GgufWriter::add_tensor_data(std::string name, GgmlType type, std::vector<int64_t> ne,
                                   std::vector<uint8_t> bytes) {
    // std::function needs a copyable callable: share the bytes rather than copy them per call.
    auto data = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
    const std::string path_hint = name;
    DSV4_TRY(add_tensor(std::move(name), type, std::move(ne), [data, path_hint](std::FILE* out) {
        return write_bytes(out, data->data(), data->size(), "tensor '" + path_hint + "'");
    }));
    if (tensors_.back().n_bytes != data->size()) {
        const Tensor& t = tensors_.back();
        Error e = make_error("tensor '" + t.name + "' was given " + std::to_string(data->size()) +
                             " bytes but its type and shape need " + std::to_string(t.n_bytes));
        tensors_.pop_back();
        return e;
    }
    return {};
}

Result<std::vector<uint8_t>> GgufWriter::header() const {
    if (alignment_ == 0 || !std::has_single_bit(alignment_))
        return make_error("GGUF alignment " + std::to_string(alignment_) + " is not a nonzero power of two");
    std::vector<uint8_t> head;
    head.insert(head.end(), {'G', 'G', 'U', 'F'});
    put<uint32_t>(head, kVersion);
    put<uint64_t>(head, tensors_.size());
    put<uint64_t>(head, kv_.size() + (alignment_ != kDefaultAlignment ? 1 : 0));
    if (alignment_ != kDefaultAlignment) {
        put_str(head, kAlignmentKey);
        put<uint32_t>(head, (uint32_t)GgufValueType::U32);
        put<uint32_t>(head, alignment_);
    }
    for (const Kv& kv : kv_) {
        put_str(head, kv.key);
        put<uint32_t>(head, (uint32_t)kv.type);
        head.insert(head.end(), kv.bytes.begin(), kv.bytes.end());
    }
    uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
        put_str(head, t.name);
        put<uint32_t>(head, (uint32_t)t.ne.size());
        for (int64_t n : t.ne) put<uint64_t>(head, (uint64_t)n);
        put<uint32_t>(head, (uint32_t)t.type);
        put<uint64_t>(head, offset);
        offset += align_up(t.n_bytes, alignment_);
    }
    return head;
}

Status GgufWriter::write(const std::string& path, const std::function<void(uint64_t, uint64_t)>& progress) const {
    // Header, metadata and tensor infos are small: encode them in memory first.
    auto encoded = header();
    if (!encoded.ok()) return make_error("cannot write '" + path + "': " + encoded.error());
    const std::vector<uint8_t>& head = *encoded;
    uint64_t total = 0;
    for (const Tensor& t : tensors_) total += t.n_bytes;

    const std::string tmp = path + ".tmp";
    std::unique_ptr<std::FILE, FileCloser> out(std::fopen(tmp.c_str(), "wb"));
    if (!out) return make_error("cannot create '" + tmp + "': " + std::strerror(errno));
    auto body = [&]() -> Status {
        DSV4_TRY(write_bytes(out.get(), head.data(), head.size(), tmp));
        DSV4_TRY(write_padding(out.get(), head.size(), alignment_, tmp));
        uint64_t done = 0;
        for (const Tensor& t : tensors_) {
            const off_t start = ftello(out.get());
            DSV4_TRY(t.produce(out.get()));
            const off_t end = ftello(out.get());
            if (start < 0 || end < 0) return make_error("cannot tell the position in '" + tmp + "'");
            if ((uint64_t)(end - start) != t.n_bytes)
                return make_error("tensor '" + t.name + "': producer wrote " + std::to_string(end - start) +
                                  " bytes, expected " + std::to_string(t.n_bytes));
            DSV4_TRY(write_padding(out.get(), (uint64_t)end, alignment_, tmp));
            done += t.n_bytes;
            if (progress) progress(done, total);
        }
        if (std::fflush(out.get()) != 0) return make_error("cannot write '" + tmp + "': " + std::strerror(errno));
        return {};
    };
    Status st = body();
    const int close_rc = std::fclose(out.release());
    if (st.ok() && close_rc != 0) st = make_error("cannot close '" + tmp + "': " + std::strerror(errno));
    if (st.ok() && std::rename(tmp.c_str(), path.c_str()) != 0)
        st = make_error("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
    if (!st.ok()) std::remove(tmp.c_str());
    return st;
}

}  // namespace dsv4
