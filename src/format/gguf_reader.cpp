// GGUF reader (v2, v3): parses the header, metadata and tensor infos of a memory-mapped file without
// trusting any length, count, type id, shape or offset, merges split parts into one tensor table, and
// serves typed metadata access whose errors name the key. Layout per ggml's GGUF spec: magic "GGUF",
// u32 version, u64 n_tensors, u64 n_kv, the key/values, the tensor infos, padding to `general.alignment`,
// then the tensor data, each tensor at an aligned offset relative to the start of the data section.
#include "format/gguf.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "core/mapped_file.h"

namespace dsv4 {

static_assert(std::endian::native == std::endian::little, "the GGUF reader maps little-endian data in place");

namespace {

constexpr uint32_t kMaxDims = 4;
constexpr size_t kDefaultAlignment = 32;
// The fewest bytes one key/value (8-byte key length + 4-byte type + 1-byte u8 value) and one tensor info
// (8-byte name length + 4-byte n_dims + 4-byte type + 8-byte offset) can take: a count that could not fit in
// the bytes left is rejected before anything is allocated for it.
constexpr uint64_t kMinKvBytes = 13;
constexpr uint64_t kMinTensorInfoBytes = 24;
// Up-front reservations are capped (in entries, sized so each stays a few MB): a count that passed the
// bytes-left check still grows its vector only as entries actually parse.
constexpr uint64_t kMaxReserveKv = 1024;
constexpr uint64_t kMaxReserveTensors = uint64_t(1) << 16;
constexpr uint64_t kMaxReserveStrings = uint64_t(1) << 20;

// Bytes of one scalar of a numeric or bool type; 0 for string, array and unknown ids.
size_t scalar_size(GgufValueType t) {
    switch (t) {
        case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::BOOL: return 1;
        case GgufValueType::U16: case GgufValueType::I16: return 2;
        case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
        case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: return 8;
        default: return 0;
    }
}

bool is_integer(GgufValueType t) {
    switch (t) {
        case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::U16: case GgufValueType::I16:
        case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::U64: case GgufValueType::I64:
            return true;
        default: return false;
    }
}

template <class T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

// An integer of any GGUF type as sign and magnitude, so u64 and i64 values both fit without loss.
struct IntVal {
    bool neg = false;
    uint64_t mag = 0;
};

IntVal int_at(GgufValueType t, const uint8_t* p) {
    auto from_signed = [](int64_t v) {
        return v < 0 ? IntVal{true, uint64_t(0) - uint64_t(v)} : IntVal{false, uint64_t(v)};
    };
    switch (t) {
        case GgufValueType::U8: return {false, load<uint8_t>(p)};
        case GgufValueType::U16: return {false, load<uint16_t>(p)};
        case GgufValueType::U32: return {false, load<uint32_t>(p)};
        case GgufValueType::U64: return {false, load<uint64_t>(p)};
        case GgufValueType::I8: return from_signed(load<int8_t>(p));
        case GgufValueType::I16: return from_signed(load<int16_t>(p));
        case GgufValueType::I32: return from_signed(load<int32_t>(p));
        case GgufValueType::I64: return from_signed(load<int64_t>(p));
        default: return {};
    }
}

// Callers check the value fits first; C++20 defines the unsigned-to-signed conversion as modular.
int64_t to_i64(IntVal v) { return v.neg ? (int64_t)(uint64_t(0) - v.mag) : (int64_t)v.mag; }

bool fits(IntVal v, int64_t lo, uint64_t hi) { return v.neg ? v.mag <= uint64_t(0) - uint64_t(lo) : v.mag <= hi; }

std::string int_str(IntVal v) {
    std::string s = v.neg ? "-" : "";
    s += std::to_string(v.mag);
    return s;
}

double float_at(GgufValueType t, const uint8_t* p) {
    return t == GgufValueType::F32 ? (double)load<float>(p) : load<double>(p);
}

// Bounds-checked little-endian cursor over one file's bytes. Each read checks the bytes left first.
class Cursor {
public:
    Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}
    size_t pos() const { return pos_; }
    uint64_t left() const { return size_ - pos_; }

    template <class T>
    bool read(T& out) {
        if (left() < sizeof(T)) return false;
        out = load<T>(data_ + pos_);
        pos_ += sizeof(T);
        return true;
    }
    // A u64 length followed by that many bytes; the length is checked against the bytes left.
    bool read_str(std::string_view& out) {
        uint64_t n = 0;
        if (!read(n) || n > left()) return false;
        out = std::string_view(reinterpret_cast<const char*>(data_ + pos_), (size_t)n);
        pos_ += (size_t)n;
        return true;
    }
    const uint8_t* take(uint64_t n) {
        if (n > left()) return nullptr;
        const uint8_t* p = data_ + pos_;
        pos_ += (size_t)n;
        return p;
    }

private:
    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
};

std::string quoted(std::string_view s) {
    // Names in errors come from the file, so keep them short and printable.
    std::string out = "'";
    for (char c : s.substr(0, 200)) out += (unsigned char)c < 0x20 || c == 0x7f ? '?' : c;
    if (s.size() > 200) out += "...";
    return out + "'";
}

}  // namespace

// One parsed file: its own metadata, alignment and tensors (data pointers into that file).
struct GgufPart {
    uint32_t version = 0;
    size_t alignment = kDefaultAlignment;
    uint64_t data_offset = 0;
    std::vector<std::pair<std::string, GgufValue>> kv;
    std::vector<GgufTensor> tensors;

    const GgufValue* find(std::string_view key) const {
        for (const auto& [k, v] : kv)
            if (k == key) return &v;
        return nullptr;
    }
};

namespace {

// Parses one GGUF file held in memory. Every error message starts with `name`.
class PartParser {
public:
    // with_data false: the bytes end after the tensor infos (GgufWriter::header); tensors get no data pointer.
    PartParser(const uint8_t* data, size_t size, const std::string& name, uint32_t split, bool with_data,
               bool keep_unknown)
        : cur_(data, size), data_(data), size_(size), name_(name), split_(split), with_data_(with_data),
          keep_unknown_(keep_unknown) {}

    Result<GgufPart> parse() {
        GgufPart part;
        DSV4_TRY(parse_header(part));
        uint64_t n_tensors = 0, n_kv = 0;
        if (!cur_.read(n_tensors) || !cur_.read(n_kv)) return fail("truncated header (file has " + std::to_string(size_) + " bytes)");
        if (n_kv > cur_.left() / kMinKvBytes)
            return fail("header claims " + std::to_string(n_kv) + " metadata entries but only " +
                        std::to_string(cur_.left()) + " bytes follow");
        if (n_tensors > cur_.left() / kMinTensorInfoBytes)
            return fail("header claims " + std::to_string(n_tensors) + " tensors but only " +
                        std::to_string(cur_.left()) + " bytes follow");

        std::unordered_set<std::string_view> keys;
        part.kv.reserve((size_t)std::min(n_kv, kMaxReserveKv));
        for (uint64_t i = 0; i < n_kv; ++i) {
            std::string_view key;
            if (!cur_.read_str(key)) return fail(at() + "truncated in the key of metadata entry " + std::to_string(i));
            if (!keys.insert(key).second) return fail("duplicate metadata key " + quoted(key));
            GgufValue v;
            DSV4_TRY(parse_value(key, v));
            part.kv.emplace_back(std::string(key), std::move(v));
        }
        DSV4_TRY(read_alignment(part));

        std::unordered_set<std::string_view> names;
        part.tensors.reserve((size_t)std::min(n_tensors, kMaxReserveTensors));
        for (uint64_t i = 0; i < n_tensors; ++i) {
            std::string_view tname;
            if (!cur_.read_str(tname)) return fail(at() + "truncated in the name of tensor " + std::to_string(i));
            if (tname.empty()) return fail("tensor " + std::to_string(i) + " has an empty name");
            if (!names.insert(tname).second) return fail("duplicate tensor name " + quoted(tname));
            GgufTensor t;
            t.name = std::string(tname);
            t.split = split_;
            DSV4_TRY(parse_tensor_info(t));
            part.tensors.push_back(std::move(t));
        }

        // The data section starts at the next multiple of the alignment after the tensor infos.
        part.data_offset = (cur_.pos() + part.alignment - 1) / part.alignment * part.alignment;
        if (with_data_ && !part.tensors.empty() && part.data_offset > size_)
            return fail("tensor data section would start at byte " + std::to_string(part.data_offset) +
                        ", past the end of the file (" + std::to_string(size_) + " bytes)");
        DSV4_TRY(place_tensors(part));
        return part;
    }

private:
    Error fail(const std::string& msg) const { return make_error(name_ + ": " + msg); }
    std::string at() const { return "at byte " + std::to_string(cur_.pos()) + ": "; }

    Status parse_header(GgufPart& part) {
        uint32_t magic = 0;
        if (!cur_.read(magic)) return fail("too short to be a GGUF file (" + std::to_string(size_) + " bytes)");
        if (std::memcmp(&magic, "GGUF", 4) != 0) return fail("not a GGUF file (bad magic)");
        if (!cur_.read(part.version)) return fail("truncated header (no version)");
        if (part.version == 1)
            return fail("GGUF v1 is not supported (it is from 2023 and used 32-bit counts); re-convert the model");
        if (part.version != 2 && part.version != 3) {
            if (part.version != 0 && (part.version & 0xffffu) == 0)
                return fail("big-endian GGUF is not supported (version field reads " +
                            std::to_string(part.version) + ")");
            return fail("unsupported GGUF version " + std::to_string(part.version) + " (2 and 3 are supported)");
        }
        return {};
    }

    Status parse_value(std::string_view key, GgufValue& v) {
        uint32_t type_id = 0;
        if (!cur_.read(type_id)) return fail(at() + "truncated in the type of key " + quoted(key));
        if (type_id > (uint32_t)GgufValueType::F64)
            return fail("key " + quoted(key) + " has unknown value type " + std::to_string(type_id));
        v.type = (GgufValueType)type_id;
        if (v.type == GgufValueType::ARRAY) return parse_array(key, v);
        if (v.type == GgufValueType::STRING) {
            if (!cur_.read_str(v.str)) return fail(at() + "truncated in the string value of key " + quoted(key));
            return {};
        }
        const size_t n = scalar_size(v.type);
        const uint8_t* p = cur_.take(n);
        if (!p) return fail(at() + "truncated in the value of key " + quoted(key));
        if (is_integer(v.type)) {
            IntVal iv = int_at(v.type, p);
            if (!iv.neg) v.u64 = iv.mag;
            if (iv.neg || iv.mag <= (uint64_t)std::numeric_limits<int64_t>::max()) v.i64 = to_i64(iv);
        } else if (v.type == GgufValueType::BOOL) {
            if (*p > 1) return fail("key " + quoted(key) + " has bool value " + std::to_string(*p) + " (not 0 or 1)");
            v.b = *p != 0;
        } else {
            v.f64 = float_at(v.type, p);
        }
        return {};
    }

    Status parse_array(std::string_view key, GgufValue& v) {
        uint32_t elem_id = 0;
        if (!cur_.read(elem_id) || !cur_.read(v.n_elems))
            return fail(at() + "truncated in the array header of key " + quoted(key));
        if (elem_id == (uint32_t)GgufValueType::ARRAY)
            return fail("key " + quoted(key) + " is an array of arrays, which GGUF readers do not support");
        if (elem_id > (uint32_t)GgufValueType::F64)
            return fail("key " + quoted(key) + " is an array of unknown value type " + std::to_string(elem_id));
        v.elem_type = (GgufValueType)elem_id;
        const std::string count = std::to_string(v.n_elems);
        if (v.elem_type == GgufValueType::STRING) {
            // Each string costs at least its 8-byte length, which bounds a believable count.
            if (v.n_elems > cur_.left() / 8)
                return fail("array " + quoted(key) + " claims " + count + " strings but only " +
                            std::to_string(cur_.left()) + " bytes follow");
            v.strs.reserve((size_t)std::min(v.n_elems, kMaxReserveStrings));
            for (uint64_t i = 0; i < v.n_elems; ++i) {
                std::string_view s;
                if (!cur_.read_str(s))
                    return fail(at() + "truncated in string " + std::to_string(i) + " of array " + quoted(key));
                v.strs.push_back(s);
            }
            return {};
        }
        const size_t es = scalar_size(v.elem_type);
        if (v.n_elems > cur_.left() / es)
            return fail("array " + quoted(key) + " claims " + count + " elements of " + std::to_string(es) +
                        " bytes but only " + std::to_string(cur_.left()) + " bytes follow");
        v.elems = cur_.take(v.n_elems * es);
        if (v.elem_type == GgufValueType::BOOL) {
            for (uint64_t i = 0; i < v.n_elems; ++i)
                if (v.elems[i] > 1)
                    return fail("array " + quoted(key) + " element " + std::to_string(i) + " is bool value " +
                                std::to_string(v.elems[i]) + " (not 0 or 1)");
        }
        return {};
    }

    Status read_alignment(GgufPart& part) {
        const GgufValue* a = part.find("general.alignment");
        if (!a) return {};
        if (a->type != GgufValueType::U32)
            return fail("general.alignment has type " + gguf_value_type_str(*a) + ", expected u32");
        if (a->u64 == 0 || !std::has_single_bit(a->u64))
            return fail("general.alignment is " + std::to_string(a->u64) + ", not a nonzero power of two");
        part.alignment = (size_t)a->u64;
        return {};
    }

    Status parse_tensor_info(GgufTensor& t) {
        const std::string tn = "tensor " + quoted(t.name);
        if (!cur_.read(t.n_dims)) return fail(at() + "truncated in the dimension count of " + tn);
        if (t.n_dims > kMaxDims)
            return fail(tn + " has " + std::to_string(t.n_dims) + " dimensions (at most 4 are supported)");
        for (uint32_t j = 0; j < t.n_dims; ++j) {
            uint64_t ne = 0;
            if (!cur_.read(ne)) return fail(at() + "truncated in the shape of " + tn);
            // ggml allows empty dimensions (0) but not negative ones; the file stores them as u64.
            if (ne > (uint64_t)std::numeric_limits<int64_t>::max())
                return fail(tn + " dimension " + std::to_string(j) + " has invalid size " + std::to_string(ne));
            t.ne[j] = (int64_t)ne;
        }
        uint32_t type_id = 0;
        if (!cur_.read(type_id)) return fail(at() + "truncated in the type of " + tn);
        const auto traits = ggml_type_from_id(type_id);
        t.type_id = type_id;
        if (!traits && keep_unknown_) {
            t.type_known = false;
            if (!cur_.read(t.file_offset)) return fail(at() + "truncated in the data offset of " + tn);
            return {};
        }
        if (!traits) return fail(tn + " has unknown ggml type " + std::to_string(type_id));
        t.type = traits->type;
        if (!cur_.read(t.file_offset)) return fail(at() + "truncated in the data offset of " + tn);

        int64_t n_elems = 1;
        for (int64_t ne : t.ne) {
            if (__builtin_mul_overflow(n_elems, ne, &n_elems))
                return fail(tn + " shape " + t.shape_str() + " has more elements than fit in 64 bits");
        }
        if (t.ne[0] % traits->block_elems != 0)
            return fail(tn + " has ne[0] = " + std::to_string(t.ne[0]) + ", not a multiple of the block size " +
                        std::to_string(traits->block_elems) + " of " + traits->name);
        uint64_t row_bytes = 0, n_bytes = 0;
        const uint64_t rows = (uint64_t)t.ne[1] * (uint64_t)t.ne[2] * (uint64_t)t.ne[3];  // <= n_elems: no overflow
        if (__builtin_mul_overflow((uint64_t)(t.ne[0] / traits->block_elems), (uint64_t)traits->block_bytes,
                                   &row_bytes) ||
            __builtin_mul_overflow(row_bytes, rows, &n_bytes) || n_bytes > std::numeric_limits<size_t>::max())
            return fail(tn + " shape " + t.shape_str() + " of " + traits->name + " needs more bytes than fit in 64 bits");
        t.n_bytes = (size_t)n_bytes;
        return {};
    }

    // Checks each tensor's offset (aligned, data inside the file, no overlap) and turns it into a pointer.
    // Without a data section only the alignment and the overlap are checked, and the pointers stay null.
    Status place_tensors(GgufPart& part) {
        const uint64_t data_bytes = part.tensors.empty() || !with_data_ ? 0 : size_ - part.data_offset;
        for (GgufTensor& t : part.tensors) {
            const uint64_t rel = t.file_offset;
            if (rel % part.alignment != 0)
                return fail("tensor " + quoted(t.name) + " data offset " + std::to_string(rel) +
                            " is not a multiple of the alignment " + std::to_string(part.alignment));
            if (!t.type_known) {  // size unknown: nothing to check the offset against
                t.file_offset = part.data_offset + rel;
                continue;
            }
            if (with_data_ && (rel > data_bytes || t.n_bytes > data_bytes - rel))
                return fail("tensor " + quoted(t.name) + " data (" + std::to_string(t.n_bytes) + " bytes at offset " +
                            std::to_string(rel) + " of the data section) runs past the end of the file (" +
                            std::to_string(size_) + " bytes, data section at " + std::to_string(part.data_offset) + ")");
            t.file_offset = part.data_offset + rel;
            t.data = with_data_ ? data_ + t.file_offset : nullptr;
        }
        // Overlapping data is a damaged or hostile table: two weights would alias.
        std::vector<const GgufTensor*> order;
        order.reserve(part.tensors.size());
        for (const GgufTensor& t : part.tensors)
            if (t.n_bytes > 0) order.push_back(&t);
        std::sort(order.begin(), order.end(),
                  [](const GgufTensor* a, const GgufTensor* b) { return a->file_offset < b->file_offset; });
        for (size_t i = 1; i < order.size(); ++i) {
            const GgufTensor* a = order[i - 1];
            const GgufTensor* b = order[i];
            if (a->file_offset + a->n_bytes > b->file_offset)
                return fail("tensors " + quoted(a->name) + " and " + quoted(b->name) + " overlap in the file");
        }
        return {};
    }

    Cursor cur_;
    const uint8_t* data_;
    size_t size_;
    const std::string& name_;
    uint32_t split_;
    bool with_data_;
    bool keep_unknown_;
};

Result<GgufPart> parse_part(const uint8_t* data, size_t size, const std::string& name, uint32_t split,
                            bool with_data = true, bool keep_unknown = false) {
    return PartParser(data, size, name, split, with_data, keep_unknown).parse();
}

// For a first split part named <prefix>-00001-of-<NNNNN>.gguf, the names of all parts; nullopt-like error
// when the name does not follow that pattern (llama.cpp's gguf-split names parts "%s-%05d-of-%05d.gguf").
Result<std::vector<std::string>> split_part_paths(const std::string& first, uint32_t count) {
    auto bad = [&] {
        return make_error("'" + first + "' declares split.count = " + std::to_string(count) +
                          " but its name does not end in -00001-of-" + std::to_string(count) +
                          ".gguf (zero-padded), so the other parts cannot be found");
    };
    constexpr std::string_view kExt = ".gguf";
    constexpr std::string_view kOf = "-of-";
    if (first.size() < kExt.size() || first.compare(first.size() - kExt.size(), kExt.size(), kExt) != 0)
        return bad();
    const std::string stem = first.substr(0, first.size() - kExt.size());
    const size_t of = stem.rfind(kOf);
    if (of == std::string::npos) return bad();
    const std::string count_str = stem.substr(of + kOf.size());
    const size_t dash = stem.rfind('-', of == 0 ? 0 : of - 1);
    if (dash == std::string::npos || dash >= of) return bad();
    const std::string no_str = stem.substr(dash + 1, of - dash - 1);
    auto digits = [](const std::string& s) {
        return !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (!digits(count_str) || !digits(no_str) || std::stoul(no_str) != 1 || std::stoul(count_str) != count)
        return bad();
    std::vector<std::string> paths;
    for (uint32_t i = 1; i <= count; ++i) {
        std::string no = std::to_string(i);
        if (no.size() < no_str.size()) no.insert(0, no_str.size() - no.size(), '0');
        paths.push_back(stem.substr(0, dash + 1) + no + std::string(kOf) + count_str + std::string(kExt));
    }
    return paths;
}

Result<uint64_t> split_key(const GgufPart& part, std::string_view key, const std::string& name) {
    const GgufValue* v = part.find(key);
    if (!v) return make_error(name + ": split part has no " + std::string(key) + " key");
    if (!is_integer(v->type) || v->i64 < 0)
        return make_error(name + ": " + std::string(key) + " has type " + gguf_value_type_str(*v) + " value " +
                          gguf_value_str(*v) + ", expected a non-negative integer");
    return v->u64;
}

}  // namespace

const char* gguf_value_type_name(GgufValueType t) {
    switch (t) {
        case GgufValueType::U8: return "u8";
        case GgufValueType::I8: return "i8";
        case GgufValueType::U16: return "u16";
        case GgufValueType::I16: return "i16";
        case GgufValueType::U32: return "u32";
        case GgufValueType::I32: return "i32";
        case GgufValueType::F32: return "f32";
        case GgufValueType::BOOL: return "bool";
        case GgufValueType::STRING: return "string";
        case GgufValueType::ARRAY: return "array";
        case GgufValueType::U64: return "u64";
        case GgufValueType::I64: return "i64";
        case GgufValueType::F64: return "f64";
    }
    return "unknown";
}

std::string gguf_value_type_str(const GgufValue& v) {
    if (v.type != GgufValueType::ARRAY) return gguf_value_type_name(v.type);
    return std::string("array[") + gguf_value_type_name(v.elem_type) + "]";
}

namespace {

std::string string_literal(std::string_view s, size_t max_chars) {
    std::string out = "\"";
    for (size_t i = 0; i < s.size() && i < max_chars; ++i) {
        const unsigned char c = (unsigned char)s[i];
        switch (c) {
            case '\n': out += "\\n"; break;
            case '\t': out += "\\t"; break;
            case '\r': out += "\\r"; break;
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            default:
                if (c < 0x20 || c == 0x7f) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\x%02x", c);
                    out += buf;
                } else {
                    out += (char)c;
                }
        }
    }
    out += "\"";
    if (s.size() > max_chars) out += "...(" + std::to_string(s.size()) + " bytes)";
    return out;
}

std::string float_str(double d) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", d);
    return buf;
}

}  // namespace

std::string gguf_value_str(const GgufValue& v, size_t max_elems, size_t max_chars) {
    switch (v.type) {
        case GgufValueType::STRING: return string_literal(v.str, max_chars);
        case GgufValueType::BOOL: return v.b ? "true" : "false";
        case GgufValueType::F32: case GgufValueType::F64: return float_str(v.f64);
        case GgufValueType::ARRAY: break;
        default: return v.i64 < 0 ? std::to_string(v.i64) : std::to_string(v.u64);
    }
    std::string out = "[";
    const uint64_t shown = std::min<uint64_t>(v.n_elems, max_elems);
    const size_t es = scalar_size(v.elem_type);
    for (uint64_t i = 0; i < shown; ++i) {
        if (i) out += ", ";
        if (v.elem_type == GgufValueType::STRING) out += string_literal(v.strs[i], max_chars);
        else if (v.elem_type == GgufValueType::BOOL) out += v.elems[i] ? "true" : "false";
        else if (is_integer(v.elem_type)) out += int_str(int_at(v.elem_type, v.elems + i * es));
        else out += float_str(float_at(v.elem_type, v.elems + i * es));
    }
    if (shown < v.n_elems) out += ", ... (" + std::to_string(v.n_elems) + " items)";
    return out + "]";
}

size_t GgufTensor::row_bytes() const { return ggml_row_bytes(ggml_traits(type), ne[0]); }

std::string GgufTensor::shape_str() const {
    std::string s = "[";
    for (uint32_t i = 0; i < n_dims && i < kMaxDims; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

GgufFile::~GgufFile() = default;

Status GgufFile::adopt_first(GgufPart&& part) {
    version_ = part.version;
    alignment_ = part.alignment;
    data_offset_ = part.data_offset;
    kv_ = std::move(part.kv);
    for (size_t i = 0; i < kv_.size(); ++i) kv_index_.emplace(kv_[i].first, i);
    return merge_tensors(std::move(part.tensors), path_);
}

Status GgufFile::merge_tensors(std::vector<GgufTensor>&& tensors, const std::string& part_name) {
    for (GgufTensor& t : tensors) {
        if (!tensor_index_.emplace(t.name, tensors_.size()).second)
            return make_error(part_name + ": tensor " + quoted(t.name) + " also appears in an earlier split part");
        tensors_.push_back(std::move(t));
    }
    return {};
}

Result<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, size_t size, std::string name) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->path_ = std::move(name);
    DSV4_ASSIGN_OR_RETURN(GgufPart part, parse_part(data, size, f->path_, 0));
    DSV4_TRY(f->adopt_first(std::move(part)));
    return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::parse_header(std::vector<uint8_t> bytes, std::string name) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->path_ = std::move(name);
    f->header_ = std::move(bytes);  // metadata values point into it: it moves in before parsing
    DSV4_ASSIGN_OR_RETURN(GgufPart part, parse_part(f->header_.data(), f->header_.size(), f->path_, 0, false));
    DSV4_TRY(f->adopt_first(std::move(part)));
    return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path, const GgufOpenOptions& options) {
    std::unique_ptr<GgufFile> f(new GgufFile());
    f->path_ = path;
    DSV4_ASSIGN_OR_RETURN(auto map, MappedFile::open(path));
    DSV4_ASSIGN_OR_RETURN(GgufPart part,
                          parse_part(map->data(), map->size(), path, 0, true, options.keep_unknown_types));
    f->maps_.push_back(std::move(map));
    DSV4_TRY(f->adopt_first(std::move(part)));

    const GgufValue* count = f->find("split.count");
    if (!count) return f;
    if (!is_integer(count->type) || count->i64 < 0 || count->u64 > 99999)
        return make_error(path + ": split.count has type " + gguf_value_type_str(*count) + " value " +
                          gguf_value_str(*count) + ", expected a part count");
    if (const GgufValue* no = f->find("split.no"); no && (!is_integer(no->type) || no->i64 < 0 || no->u64 != 0))
        return make_error(path + ": this is split part " + gguf_value_str(*no) + " (zero-based) of " +
                          gguf_value_str(*count) + "; open the first part (*-00001-of-*.gguf) instead");
    if (count->u64 > 1) DSV4_TRY(f->open_splits((uint32_t)count->u64, options));
    return f;
}

Status GgufFile::open_splits(uint32_t count, const GgufOpenOptions& options) {
    DSV4_ASSIGN_OR_RETURN(std::vector<std::string> paths, split_part_paths(path_, count));
    for (uint32_t i = 1; i < count; ++i) {
        const std::string& p = paths[i];
        auto map = MappedFile::open(p);
        if (!map.ok())
            return make_error("split model '" + path_ + "' needs part " + std::to_string(i + 1) + " of " +
                              std::to_string(count) + ": " + map.error());
        DSV4_ASSIGN_OR_RETURN(GgufPart part,
                              parse_part((*map)->data(), (*map)->size(), p, i, true, options.keep_unknown_types));
        DSV4_ASSIGN_OR_RETURN(uint64_t no, split_key(part, "split.no", p));
        DSV4_ASSIGN_OR_RETURN(uint64_t n, split_key(part, "split.count", p));
        if (no != i || n != count)
            return make_error(p + ": split.no = " + std::to_string(no) + ", split.count = " + std::to_string(n) +
                              ", expected part " + std::to_string(i) + " (zero-based) of " + std::to_string(count));
        DSV4_TRY(merge_tensors(std::move(part.tensors), p));
        maps_.push_back(std::move(*map));
    }
    n_splits_ = count;
    if (const GgufValue* total = find("split.tensors.count"); total && is_integer(total->type) &&
                                                             total->u64 != tensors_.size())
        return make_error(path_ + ": split.tensors.count is " + gguf_value_str(*total) + " but the " +
                          std::to_string(count) + " parts hold " + std::to_string(tensors_.size()) + " tensors");
    return {};
}

// ---- metadata access ----

bool GgufFile::has(std::string_view key) const { return find(key) != nullptr; }

const GgufValue* GgufFile::find(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufTensor* GgufFile::tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Result<const GgufValue*> lookup(const GgufFile& f, std::string_view key) {
    const GgufValue* v = f.find(key);
    if (!v) return make_error(f.path() + ": metadata key '" + std::string(key) + "' not found");
    return v;
}

Error type_error(const GgufFile& f, std::string_view key, const GgufValue& v, const char* expected) {
    return make_error(f.path() + ": metadata key '" + std::string(key) + "' has type " + gguf_value_type_str(v) +
                      ", expected " + expected);
}

// The integer in a scalar value, or an error naming the key when it is not an integer.
Result<IntVal> scalar_int(const GgufFile& f, std::string_view key, const char* expected) {
    DSV4_ASSIGN_OR_RETURN(const GgufValue* v, lookup(f, key));
    if (!is_integer(v->type)) return type_error(f, key, *v, expected);
    // parse_value mirrors every integer into u64 (when >= 0) or i64 (when < 0).
    if (v->i64 < 0) return IntVal{true, uint64_t(0) - uint64_t(v->i64)};
    return IntVal{false, v->u64};
}

Error range_error(const GgufFile& f, std::string_view key, IntVal v, const char* type) {
    return make_error(f.path() + ": metadata key '" + std::string(key) + "' value " + int_str(v) +
                      " does not fit in " + type);
}

template <class T>
Result<std::vector<T>> int_array(const GgufFile& f, std::string_view key, const char* expected, const char* type) {
    DSV4_ASSIGN_OR_RETURN(const GgufValue* v, lookup(f, key));
    if (v->type != GgufValueType::ARRAY || !is_integer(v->elem_type)) return type_error(f, key, *v, expected);
    const size_t es = scalar_size(v->elem_type);
    std::vector<T> out;
    out.reserve((size_t)v->n_elems);
    for (uint64_t i = 0; i < v->n_elems; ++i) {
        IntVal iv = int_at(v->elem_type, v->elems + i * es);
        if (!fits(iv, std::numeric_limits<T>::min(), std::numeric_limits<T>::max()))
            return make_error(f.path() + ": metadata key '" + std::string(key) + "' element " + std::to_string(i) +
                              " = " + int_str(iv) + " does not fit in " + type);
        out.push_back((T)to_i64(iv));
    }
    return out;
}

}  // namespace

Result<uint32_t> GgufFile::get_u32(std::string_view key) const {
    DSV4_ASSIGN_OR_RETURN(IntVal v, scalar_int(*this, key, "an integer (u32)"));
    if (!fits(v, 0, std::numeric_limits<uint32_t>::max())) return range_error(*this, key, v, "u32");
    return (uint32_t)v.mag;
}

Result<uint64_t> GgufFile::get_u64(std::string_view key) const {
    DSV4_ASSIGN_OR_RETURN(IntVal v, scalar_int(*this, key, "an integer (u64)"));
    if (v.neg) return range_error(*this, key, v, "u64");
    return v.mag;
}

Result<int64_t> GgufFile::get_i64(std::string_view key) const {
    DSV4_ASSIGN_OR_RETURN(IntVal v, scalar_int(*this, key, "an integer (i64)"));
    if (!fits(v, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
        return range_error(*this, key, v, "i64");
    return to_i64(v);
}

Result<float> GgufFile::get_f32(std::string_view key) const {
    DSV4_ASSIGN_OR_RETURN(const GgufValue* v, lookup(*this, key));
    if (v->type != GgufValueType::F32 && v->type != GgufValueType::F64) return type_error(*this, key, *v, "f32");
    return (float)v->f64;
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
    DSV4_ASSIGN_OR_RETURN(const GgufValue* v, lookup(*this, key));
    if (v->type != GgufValueType::BOOL) return type_error(*this, key, *v, "bool");
    return v->b;
}

Result<std::string> GgufFile::get_str(std::string_view key) const {
    DSV4_ASSIGN_OR_RETURN(const GgufValue* v, lookup(*this, key));
    if (v->type != GgufValueType::STRING) return type_error(*this, key, *v, "string");
    return std::string(v->str);
}

Result<std::vector<uint32_t>> GgufFile::get_arr_u32(std::string_view key) const {
    return int_array<uint32_t>(*this, key, "an integer array (array[u32])", "u32");
}

Result<std::vector<int32_t>> GgufFile::get_arr_i32(std::string_view key) const {
    return int_array<int32_t>(*this, key, "an integer array (array[i32])", "i32");
}

Result<std::vector<float>> GgufFile::get_arr_f32(std::string_view key) const {
    DSV4_ASSIGN_OR_RETURN(const GgufValue* v, lookup(*this, key));
    if (v->type != GgufValueType::ARRAY ||
        (v->elem_type != GgufValueType::F32 && v->elem_type != GgufValueType::F64))
        return type_error(*this, key, *v, "array[f32]");
    const size_t es = scalar_size(v->elem_type);
    std::vector<float> out((size_t)v->n_elems);
    for (uint64_t i = 0; i < v->n_elems; ++i) out[i] = (float)float_at(v->elem_type, v->elems + i * es);
    return out;
}

Result<std::vector<std::string_view>> GgufFile::get_arr_str(std::string_view key) const {
    DSV4_ASSIGN_OR_RETURN(const GgufValue* v, lookup(*this, key));
    if (v->type != GgufValueType::ARRAY || v->elem_type != GgufValueType::STRING)
        return type_error(*this, key, *v, "array[string]");
    return v->strs;
}

}  // namespace dsv4
