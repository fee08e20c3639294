// Implementation of CPhoneNumber.h on top of libphonenumber's C++ API.
// See the header for the contract (ownership, thread safety, error codes).

#include "CPhoneNumber.h"

#include <cstring>
#include <string>

#include <phonenumbers/phonenumber.pb.h>
#include <phonenumbers/phonenumberutil.h>

namespace {

using i18n::phonenumbers::PhoneNumber;
using i18n::phonenumbers::PhoneNumberUtil;

// Writes `value` plus a NUL into buf[0 ..< len], or fails if it won't fit.
bool copy_out(const std::string &value, char *buf, size_t len) {
  if (value.size() >= len) return false;
  std::memcpy(buf, value.data(), value.size());
  buf[value.size()] = '\0';
  return true;
}

void clear(char *buf, size_t len) {
  if (buf != nullptr && len > 0) buf[0] = '\0';
}

int normalize(const char *input, const char *default_region,
              char *out, size_t out_len,
              char *region_out, size_t region_out_len) {
  // Thread-safe, leaky singleton (pthread_once); its const methods are
  // safe to call concurrently.
  const PhoneNumberUtil &util = *PhoneNumberUtil::GetInstance();

  // An empty/NULL default region maps to libphonenumber's "unknown region"
  // ("ZZ"): only numbers in international format ("+...") then parse.
  const std::string region =
      (default_region != nullptr && default_region[0] != '\0')
          ? std::string(default_region)
          : std::string("ZZ");

  PhoneNumber number;
  switch (util.Parse(std::string(input), region, &number)) {
    case PhoneNumberUtil::NO_PARSING_ERROR:
      break;
    case PhoneNumberUtil::INVALID_COUNTRY_CODE_ERROR:
      return CPHONE_ERR_COUNTRY_CODE;
    default:  // NOT_A_NUMBER, TOO_SHORT_AFTER_IDD, TOO_SHORT_NSN, TOO_LONG_NSN
      return CPHONE_ERR_NOT_A_NUMBER;
  }

  if (!util.IsValidNumber(number)) return CPHONE_ERR_INVALID;

  std::string e164;
  util.Format(number, PhoneNumberUtil::E164, &e164);
  if (!copy_out(e164, out, out_len)) return CPHONE_ERR_BUFFER_TOO_SMALL;

  if (region_out != nullptr) {
    std::string detected;
    util.GetRegionCodeForNumber(number, &detected);
    if (!copy_out(detected, region_out, region_out_len)) {
      clear(out, out_len);
      return CPHONE_ERR_BUFFER_TOO_SMALL;
    }
  }
  return CPHONE_OK;
}

}  // namespace

extern "C" int cphone_normalize_e164(const char *input,
                                     const char *default_region,
                                     char *out, size_t out_len,
                                     char *region_out, size_t region_out_len) {
  clear(out, out_len);
  clear(region_out, region_out_len);
  if (input == nullptr || out == nullptr || out_len == 0 ||
      (region_out != nullptr && region_out_len == 0)) {
    return CPHONE_ERR_ARGUMENT;
  }
  int status;
  try {
    status = normalize(input, default_region, out, out_len,
                       region_out, region_out_len);
  } catch (...) {
    status = CPHONE_ERR_INTERNAL;
  }
  if (status != CPHONE_OK) {
    clear(out, out_len);
    clear(region_out, region_out_len);
  }
  return status;
}
