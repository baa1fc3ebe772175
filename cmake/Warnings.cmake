add_library(vibepit_warnings INTERFACE)
target_compile_options(vibepit_warnings INTERFACE -Wall -Wextra -Werror -Wshadow -Wnon-virtual-dtor)
add_library(vibepit::warnings ALIAS vibepit_warnings)
