# SPDX-License-Identifier: Apache-2.0
# ctest install_find_package (cmake -P): `cmake --install` of the build tree into a fresh prefix,
# then examples/cpp configured out of tree with only that prefix to find ShapeVM
# (find_package(ShapeVM REQUIRED), ShapeVM::shapevm), built and run on examples/lstm_cell.py and
# on its inline program; each run must end "OK: O2 matches O0" ("O0 matches O0" in an
# interpreter-only build). The prefix must hold the public headers only (no internal headers);
# with the Python module built, it must also hold the shapevm package, importable from there.
# Inputs: BUILD_DIR, SOURCE_DIR, WORK_DIR, GENERATOR, CXX_COMPILER, BUILD_TYPE.
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER BUILD_TYPE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_find_package.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${code}):\n${out}\n${err}")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

set(prefix ${WORK_DIR}/prefix)
set(consumer ${WORK_DIR}/example-build)
file(REMOVE_RECURSE ${WORK_DIR})
run_step("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

foreach(required include/shapevm/shapevm.h include/shapevm/tensor.h include/shapevm/errors.def bin/shapevm)
  if(NOT EXISTS ${prefix}/${required})
    message(FATAL_ERROR "the install lacks ${required}")
  endif()
endforeach()
file(GLOB_RECURSE configs ${prefix}/*/ShapeVMConfig.cmake)
file(GLOB_RECURSE versions ${prefix}/*/ShapeVMConfigVersion.cmake)
if(NOT configs OR NOT versions)
  message(FATAL_ERROR "the install lacks ShapeVMConfig.cmake / ShapeVMConfigVersion.cmake")
endif()
file(GLOB internal LIST_DIRECTORIES true ${prefix}/include/*)
if(NOT internal STREQUAL "${prefix}/include/shapevm")
  message(FATAL_ERROR "the install's include/ holds more than the public shapevm/ folder: ${internal}")
endif()

run_step("configuring examples/cpp against the install" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/cpp -B ${consumer}
         -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
         -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
run_step("building examples/cpp" ${CMAKE_COMMAND} --build ${consumer})

foreach(program ${SOURCE_DIR}/examples/lstm_cell.py "")
  run_step("running shapevm_example ${program}" ${consumer}/shapevm_example ${program})
  message(STATUS "shapevm_example ${program}:\n${step_output}")
  if(NOT step_output MATCHES "OK: O[02] matches O0")
    message(FATAL_ERROR "shapevm_example ${program} did not report a match:\n${step_output}")
  endif()
endforeach()

# The Python package (SHAPEVM_BUILD_PYTHON builds): installed, and importable from the prefix alone.
if(EXISTS ${BUILD_DIR}/python/shapevm/__init__.py)
  file(GLOB_RECURSE packages ${prefix}/*__init__.py)
  list(FILTER packages INCLUDE REGEX "/shapevm/__init__\\.py$")
  if(NOT packages)
    message(FATAL_ERROR "the install lacks the shapevm Python package")
  endif()
  list(GET packages 0 package)
  get_filename_component(site ${package} DIRECTORY)
  get_filename_component(site ${site} DIRECTORY)
  # (no `;` in the Python text: run_step's ARGN would split the argument there)
  run_step("importing the installed shapevm package" ${CMAKE_COMMAND} -E env PYTHONPATH=${site} /usr/bin/python3 -c
           "import shapevm\nassert shapevm.__file__.startswith('${site}')\nprint(shapevm.load('${SOURCE_DIR}/examples/lstm_cell.py').functions)")
  message(STATUS "installed shapevm package: ${step_output}")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
