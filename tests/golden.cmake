# The golden acceptance check exactly as the project's acceptance runs it: shared/tools/golden_check.py driving
# `dsv4 logits` (needs Debian's python3 with numpy; scripts/setup.sh installs python3-numpy).
foreach(set flash-mini pro-mini quant-mini)
  add_test(NAME golden_check_${set}
           COMMAND /usr/bin/python3 ${DSV4_SHARED_DIR}/tools/golden_check.py ${CMAKE_BINARY_DIR}/bin/dsv4
                   ${DSV4_SHARED_DIR}/golden/${set})
  set_tests_properties(golden_check_${set} PROPERTIES TIMEOUT 1200 LABELS "golden;slow")
endforeach()
