# skim_library(name dir [PUBLIC deps...]): a static library of every .cpp under dir,
# or an interface library while the folder holds headers only.
function(skim_library name dir)
  cmake_parse_arguments(ARG "" "" "PUBLIC" ${ARGN})
  file(GLOB_RECURSE _src CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/${dir}/*.cpp)
  if(_src)
    add_library(${name} STATIC ${_src})
    target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
    target_link_libraries(${name} PUBLIC ${ARG_PUBLIC})
  else()
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
    target_link_libraries(${name} INTERFACE ${ARG_PUBLIC})
  endif()
endfunction()

# skim_test(concern libs...): one GoogleTest binary per folder tests/<concern>.
function(skim_test concern)
  file(GLOB _src CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${concern}/*.cpp)
  if(NOT _src)
    return()
  endif()
  add_executable(test_${concern} ${_src})
  target_link_libraries(test_${concern} PRIVATE ${ARGN} GTest::gtest_main)
  target_compile_definitions(test_${concern} PRIVATE
    SKIM_SOURCE_DIR="${PROJECT_SOURCE_DIR}" SKIM_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(test_${concern} DISCOVERY_MODE PRE_TEST
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    PROPERTIES LABELS ${concern} ENVIRONMENT OMP_WAIT_POLICY=passive)  # see tools/skim.cpp
endfunction()
