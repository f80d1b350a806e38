# Turns a text file into a C source with a NUL-terminated char array:
#   cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake
# (run at build time, so editing the input rebuilds the library).
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" hexlen)
math(EXPR len "${hexlen} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)"
       "\\1\n  " bytes "${bytes}")
file(WRITE "${OUT}.tmp"
  "/* Generated from ${IN} by cmake/embed.cmake; do not edit. */\n"
  "#include <stddef.h>\n"
  "static const unsigned char bytes[] = {\n  ${bytes}0x00};\n"
  "const char *const ${NAME} = (const char *)bytes;\n"
  "const size_t ${NAME}_len = ${len};\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
