// Assertions about named errors: the code, and that the message names the parameter.
#pragma once

#include <catch2/catch.hpp>
#include <string>

#include "cgp/common/expected.hpp"

#define CGP_REQUIRE_ERROR(expr, expected_code, expected_parameter)           \
  do {                                                                       \
    auto cgp_result_ = (expr);                                               \
    REQUIRE_FALSE(static_cast<bool>(cgp_result_));                           \
    const ::cgp::Error& cgp_error_ = cgp_result_.error();                    \
    INFO("error: " << cgp_error_.to_string());                               \
    CHECK(cgp_error_.code == (expected_code));                               \
    CHECK(cgp_error_.parameter == std::string(expected_parameter));          \
    CHECK(cgp_error_.message.find(expected_parameter) != std::string::npos); \
  } while (0)
