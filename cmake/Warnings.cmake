add_library(vibepit_warnings INTERFACE)
target_compile_options(vibepit_warnings INTERFACE -Wall -Wextra -Werror -Wshadow -Wnon-virtual-dtor)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
  # GCC 12 reports impossible overlaps inside std::string's inlined copies at -O3
  # (GCC bug 105329); the warning stays on for every other compiler.
  target_compile_options(vibepit_warnings INTERFACE -Wno-restrict)
  # With sanitizers, GCC 12 cannot pair the class-specific operator new/delete of Asio's
  # coroutine frames and flags every coroutine; ASan checks the real pairing at run time.
  target_compile_options(vibepit_warnings INTERFACE -Wno-mismatched-new-delete)
endif()
add_library(vibepit::warnings ALIAS vibepit_warnings)
