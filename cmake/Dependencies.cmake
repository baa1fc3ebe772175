# Every dependency comes from a Debian 12 package; nothing is downloaded at build time.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(CARES REQUIRED IMPORTED_TARGET libcares)
find_package(OpenSSL REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 REQUIRED)
find_package(yaml-cpp REQUIRED)  # .vibepit/network.yaml, comments kept (libyaml-cpp-dev)
# vibepit ci --mode learn: registrable domains from the Public Suffix List (libpsl-dev)
pkg_check_modules(PSL REQUIRED IMPORTED_TARGET libpsl)
# The project as the sandbox sees it, through a filter that refuses git repositories
# (launcher/guard/include/vibepit/launcher/guard/project_guard.hpp; libfuse3-dev)
pkg_check_modules(FUSE3 REQUIRED IMPORTED_TARGET fuse3)

find_path(ASIO_INCLUDE_DIR asio.hpp REQUIRED)
add_library(vibepit_asio INTERFACE)
target_include_directories(vibepit_asio SYSTEM INTERFACE ${ASIO_INCLUDE_DIR})
# Asio picks aligned_alloc() or operator new for its recycled blocks by testing a libstdc++
# macro that is only defined once a standard header has been included, so translation units
# that include Asio first would free with the other function. One choice for all TUs.
# Each thread keeps freed coroutine frames and operation blocks for reuse, 2 of each kind by
# default. A keep-alive request through the proxy nests five or six coroutines (session,
# request, response, reads, writes), so most frames missed the cache and went to malloc: 14
# mallocs a request with 2, 9 with 8 (perf probe on malloc, 2 000 requests). The size is
# part of a thread_info_base's layout, so it too is one choice for all TUs.
target_compile_definitions(vibepit_asio INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED
  ASIO_DISABLE_STD_ALIGNED_ALLOC ASIO_RECYCLING_ALLOCATOR_CACHE_SIZE=8)
target_link_libraries(vibepit_asio INTERFACE Threads::Threads)
add_library(vibepit::asio ALIAS vibepit_asio)

if(VIBEPIT_TESTS)
  find_package(GTest REQUIRED)
endif()
if(VIBEPIT_BENCH)
  find_package(benchmark REQUIRED)
endif()
