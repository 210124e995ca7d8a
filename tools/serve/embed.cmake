# Writes OUT, a C file defining serve_page_html[] (the bytes of IN plus a
# NUL) and serve_page_html_len, so the chat page ships inside the binary.
# Run as: cmake -DIN=chat.html -DOUT=page.c -P embed.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR len "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "/* Generated from tools/serve/chat.html by tools/serve/embed.cmake. */\n"
  "#include <stddef.h>\nconst char serve_page_html[] = {\n${bytes}0};\n"
  "const size_t serve_page_html_len = ${len};\n")
