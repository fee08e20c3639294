// CPhoneNumber: a minimal C interface to Google's libphonenumber (C++,
// Debian package libphonenumber-dev), so that Swift can use it without
// C++ interop. Only plain C types cross this boundary.
//
// Ownership: the caller owns every buffer passed in. Nothing allocated by
// this library escapes it; there is nothing to free.
//
// Thread safety: every function here may be called concurrently from any
// thread. They hold no state of their own and only use
// i18n::phonenumbers::PhoneNumberUtil::GetInstance(), a lazily created,
// never destroyed singleton (initialised once under pthread_once in
// Debian's build) whose parsing, validation and formatting methods are
// const and thread-safe (its internal regular-expression cache is
// mutex-guarded).
//
// Exceptions: no C++ exception ever crosses this boundary; an unexpected
// one is reported as CPHONE_ERR_INTERNAL.

#ifndef CPHONENUMBER_H
#define CPHONENUMBER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Success.
#define CPHONE_OK 0
/// A required pointer was NULL, or a buffer length was 0.
#define CPHONE_ERR_ARGUMENT (-1)
/// The input is not a phone number at all (no digits, too short or too
/// long to be one, or garbage): libphonenumber's Parse failed.
#define CPHONE_ERR_NOT_A_NUMBER (-2)
/// The country could not be determined: the input has no international
/// prefix and the default region is unknown/empty, or the number's
/// country calling code does not exist.
#define CPHONE_ERR_COUNTRY_CODE (-3)
/// The input parses, but is not a valid number for the region it belongs
/// to (PhoneNumberUtil::IsValidNumber returned false).
#define CPHONE_ERR_INVALID (-4)
/// An output buffer is too small for the result plus its NUL terminator.
#define CPHONE_ERR_BUFFER_TOO_SMALL (-5)
/// Anything else, e.g. a C++ exception (such as std::bad_alloc) caught at
/// the boundary.
#define CPHONE_ERR_INTERNAL (-6)

/// The longest E.164 string ("+" and at most 15 digits) plus the NUL
/// terminator: an `out` buffer of this size is always large enough.
#define CPHONE_E164_BUFFER_SIZE 17
/// A region code ("DE", or "001" for non-geographic numbers) plus NUL.
#define CPHONE_REGION_BUFFER_SIZE 4

/// Parses `input` (UTF-8, NUL-terminated; national numbers are read as
/// numbers of `default_region`), checks it with IsValidNumber and writes
/// its E.164 form (e.g. "+491701234567") to `out` as a NUL-terminated
/// string. Any extension in the input is dropped, as E.164 has none.
///
/// - input: the number as typed, e.g. "0170 1234567" or "+49 170 1234567".
/// - default_region: an upper-case ISO 3166-1 alpha-2 code such as "DE",
///   used when `input` has no international prefix; NULL or "" means none,
///   in which case `input` must start with "+" (or fails with
///   CPHONE_ERR_COUNTRY_CODE).
/// - out, out_len: the caller's buffer and its size in bytes (including
///   room for the NUL); CPHONE_E164_BUFFER_SIZE always suffices.
/// - region_out, region_out_len: optional (NULL/0 to skip); receives the
///   region the number belongs to, e.g. "DE", or "001" for
///   non-geographic numbers such as +800 ones.
///
/// Returns CPHONE_OK (0) or one of the negative CPHONE_ERR_* codes. On any
/// error, `out` (and `region_out`, if given) hold an empty string whenever
/// their length is non-zero.
int cphone_normalize_e164(const char *input,
                          const char *default_region,
                          char *out, size_t out_len,
                          char *region_out, size_t region_out_len);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CPHONENUMBER_H
