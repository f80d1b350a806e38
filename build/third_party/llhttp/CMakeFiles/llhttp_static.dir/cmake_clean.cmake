file(REMOVE_RECURSE
  "CMakeFiles/llhttp_static.dir/usr/share/llhttp/api.c.o"
  "CMakeFiles/llhttp_static.dir/usr/share/llhttp/api.c.o.d"
  "CMakeFiles/llhttp_static.dir/usr/share/llhttp/http.c.o"
  "CMakeFiles/llhttp_static.dir/usr/share/llhttp/http.c.o.d"
  "CMakeFiles/llhttp_static.dir/usr/share/llhttp/llhttp.c.o"
  "CMakeFiles/llhttp_static.dir/usr/share/llhttp/llhttp.c.o.d"
  "libllhttp_static.a"
  "libllhttp_static.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/llhttp_static.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
