# Turn files into a C++ source of string constants, so the vibepit binary carries its image
# definitions and presets wherever it is installed. Run as: cmake -DOUT=... -DFILES=a;b
# -DROOT=... -P embed.cmake
set(body "// Generated from container/ by embed.cmake. Do not edit.\n#include <map>\n#include <string>\n\nnamespace vibepit::launcher {\nconst std::map<std::string, std::string>& embedded_files() {\n  static const std::map<std::string, std::string> files = {\n")
foreach(f IN LISTS FILES)
  file(READ "${f}" content)
  file(RELATIVE_PATH rel "${ROOT}" "${f}")
  string(FIND "${content}" ")vp_embed\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${f} contains the raw-string delimiter")
  endif()
  string(APPEND body "      {\"${rel}\", R\"vp_embed(${content})vp_embed\"},\n")
endforeach()
string(APPEND body "  };\n  return files;\n}\n}  // namespace vibepit::launcher\n")
file(WRITE "${OUT}.tmp" "${body}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
