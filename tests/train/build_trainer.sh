# Sourced by the tests of trainers across processes: build NAME builds
# NAME.c (in the current folder, $work) into NAME with the compiler its head
# names (mpicc or cc), the libraries of its build line and -Wall -Werror.
# Wants $here (tests/train) and $work set.
build() {
    local libs cc
    libs=$(cd "$here" && /usr/bin/python3 -c "import build_line; print(' '.join(build_line.libraries('$work/$1.c')))")
    cc=cc
    grep -q '^ \* build: *mpicc ' $1.c && cc=mpicc
    $cc -O2 -fno-trapping-math -ffp-contract=off -Wall -Werror $1.c -o $1 $libs
}
