// Recoverable errors as values: a Result<T> holds a value or a message naming what is wrong.
// Broken invariants are not errors: they abort through DSV4_CHECK (check.h).
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace dsv4 {

struct Error {
    std::string message;
};

inline Error make_error(std::string message) { return Error{std::move(message)}; }

template <class T>
class [[nodiscard]] Result {
public:
    Result(T value) : v_(std::move(value)) {}
    Result(Error error) : v_(std::move(error)) {}

    bool ok() const { return v_.index() == 0; }
    explicit operator bool() const { return ok(); }
    T& value() & { return std::get<0>(v_); }
    const T& value() const& { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }
    const std::string& error() const { return std::get<1>(v_).message; }
    Error take_error() && { return std::get<1>(std::move(v_)); }

private:
    std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
public:
    Result() = default;
    Result(Error error) : err_(std::move(error.message)), failed_(true) {}
    bool ok() const { return !failed_; }
    explicit operator bool() const { return ok(); }
    const std::string& error() const { return err_; }
    Error take_error() && { return Error{std::move(err_)}; }

private:
    std::string err_;
    bool failed_ = false;
};

using Status = Result<void>;

}  // namespace dsv4

// Propagate an error from an expression returning Result<...>/Status.
#define DSV4_TRY(expr)                                          \
    do {                                                        \
        auto&& dsv4_try_r_ = (expr);                            \
        if (!dsv4_try_r_.ok()) return std::move(dsv4_try_r_).take_error(); \
    } while (0)

#define DSV4_CONCAT_INNER_(a, b) a##b
#define DSV4_CONCAT_(a, b) DSV4_CONCAT_INNER_(a, b)
// Assign the value of a Result expression to `lhs`, or return its error.
#define DSV4_ASSIGN_OR_RETURN(lhs, expr) DSV4_ASSIGN_OR_RETURN_IMPL_(DSV4_CONCAT_(dsv4_r_, __LINE__), lhs, expr)
#define DSV4_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
    auto tmp = (expr);                              \
    if (!tmp.ok()) return std::move(tmp).take_error(); \
    lhs = std::move(tmp).value()
